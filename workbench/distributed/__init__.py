"""Bursts and the all-reduce benchmark as torchrun jobs: the launcher, one rank, the benchmark."""
