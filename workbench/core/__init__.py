"""The lowest layer: the knobs, the errors they raise, what a burst measured, the NCCL table.

Imports nothing else of the workbench; every other layer may import it.
"""
