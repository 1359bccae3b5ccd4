"""Scaling policies, one module each; no policy imports another.

Every policy implements ``scheduler_core.policies.base.Policy``; the
``scheduler_core.registry`` maps their names to them.
"""
