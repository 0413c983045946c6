"""The tuner's proving ground: simulated throughput landscapes on which the tuner, Optuna and
random search are judged at equal budgets (``benchmarks/tuner_landscapes.py``, the tests).

``landscapes``: CPU-shaped (batch x workers x prefetch, a loader that shares the model's cores);
``gpu_landscapes``: GPU-shaped (precision, layout, the data path, a memory edge, drift).

Benchmark code, not the library's: ``workbench`` never imports it (an import-linter contract in
``pyproject.toml``). The benchmark scripts import it as ``proving_ground`` (``benchmarks/`` is
their path's first entry); the tests through ``tests/benchmark_modules.py``.
"""
