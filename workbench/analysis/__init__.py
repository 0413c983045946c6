"""What a set of bursts says: sweeps, the loader ceiling, diagnosis, advice, profiling."""
