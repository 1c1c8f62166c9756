"""Progress bars that stay readable in logs: frequent on a terminal, every 30 s otherwise."""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress_bar(total: int, desc: str, **kwargs) -> tqdm:
    interactive = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, dynamic_ncols=True, mininterval=0.2 if interactive else 30, **kwargs)
