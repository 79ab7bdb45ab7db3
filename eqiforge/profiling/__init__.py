"""Profiling kernels on a GPU for the learned cost model (``eqiforge cost profile``).

Modules: ``candidates`` (which kernels to measure: a stratified sweep of shapes and configurations, and
active-learning selection), ``profile`` (the measuring loop: budget, incremental resumable JSON lines),
``measure`` (the CUDA timer: a kernel spec built and timed with ``triton.testing.do_bench``) and ``static``
(static resources of a kernel, cached on disk). Nothing here imports egglog, so it runs on a GPU machine
that has only torch and triton.
"""
