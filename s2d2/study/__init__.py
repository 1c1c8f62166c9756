"""The studies of the engine: task families, held-out evaluation, the benchmark grid and its reports,
throughput, Python overhead and the cost model.

Not part of the engine: the engine never imports this package. The dashboard reads finished grids through
:mod:`s2d2.study.results` alone, never through the grid runner (:mod:`s2d2.study.bench`).
"""
