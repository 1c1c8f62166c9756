"""S2D2 as an SGLang dLLM algorithm: ``--dllm-algorithm S2D2`` (docs/SERVING.md).

SGLang calls :func:`register` (the ``sglang.srt.plugins`` entry point) before it
parses its arguments and again in every scheduler process. Registration adds the
algorithms to SGLang's table and, on a host where SGLang would import vLLM's CUDA
rotary kernels that do not exist there, an inert stand-in for that module.
"""

from __future__ import annotations


def register() -> None:
    """Make ``--dllm-algorithm S2D2`` (and ``LowConfidenceOwnMask``) known to SGLang."""
    from .instrument import count_forwards_if_asked
    from .platform import install_rotary_stand_in

    install_rotary_stand_in()
    count_forwards_if_asked()
    from sglang.srt.dllm.algorithm import algo_name_to_cls

    from .algorithm import S2D2, LowConfidenceOwnMask

    algo_name_to_cls[S2D2.__name__] = S2D2
    algo_name_to_cls[LowConfidenceOwnMask.__name__] = LowConfidenceOwnMask
