"""The engine inside other people's tools: lm-evaluation-harness (:mod:`s2d2.integrations.lm_eval`) and SGLang's
dLLM serving (:mod:`s2d2.integrations.sglang`).

Each integration imports the engine and its tool; the engine imports none of them.
"""
