"""Adapters: the I/O implementations of the ports in ``scheduler_core.ports``."""
