"""What SGLang needs on a host without CUDA: an inert ``vllm._custom_ops``.

SGLang's rotary embedding, on a device that is neither CUDA, ROCm nor one of its
named CPU/NPU platforms, imports ``rotary_embedding`` from ``vllm._custom_ops``
when the layer is built, and calls it only on the CUDA path. A plain
``--device cpu`` server therefore needs the module to exist, not to work: the
stand-in raises if it is ever called, so a wrong path fails loudly instead of
computing something else.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def _not_on_this_host(*args, **kwargs):
    raise RuntimeError("vllm._custom_ops is an inert stand-in on this host (no CUDA, no vLLM); nothing may call it")


def install_rotary_stand_in() -> bool:
    """Register the stand-in when CUDA and vLLM are both absent; returns whether it did."""
    import torch

    if torch.cuda.is_available() or "vllm" in sys.modules or importlib.util.find_spec("vllm") is not None:
        return False
    package = types.ModuleType("vllm")
    package.__path__ = []
    ops = types.ModuleType("vllm._custom_ops")
    ops.rotary_embedding = _not_on_this_host
    package._custom_ops = ops
    sys.modules["vllm"], sys.modules["vllm._custom_ops"] = package, ops
    return True
