"""trainscaler's pure scheduling core: models, accounting and policies.

Stdlib and pydantic only: no clock reads, no I/O, no process-global state.
"""
