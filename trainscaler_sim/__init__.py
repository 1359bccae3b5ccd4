"""Everything simulated: the loopback Kubernetes API server and its
controllers, and the trace-driven cluster simulator. Never imported by the
production runtime; only the CLI composes it with ``workers``.
"""
