"""The in-process burst: loop, training step, timing, telemetry, hardware, loaders, workloads
and their sample datasets. Never imports the layers above (analysis, tuning, notebook, cli)."""
