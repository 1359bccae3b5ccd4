"""The embedded one-command system's simulated side, without the runtime.

Owns the parts ``trainscaler run`` composes around the real runtime: a
process supervisor (``supervisor``), loopback port choice (``ports``), epoch
time curves from the measured traces or built-in synthetic ones (``curves``),
the simulated training-job driver whose pods report epochs through the HTTP
API (``driver``) and the live terminal table (``table``). Nothing here imports
``workers``: only the CLI composes the two.
"""
