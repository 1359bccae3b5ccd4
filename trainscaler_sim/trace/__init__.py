"""Trace-driven simulation of a GPU cluster running elastic training jobs.

``traces`` reads the measured application traces, ``workload`` the job
arrival CSVs, ``packing`` places replicas on nodes, ``engine`` runs the
discrete-time simulation through ``scheduler_core.registry.decide``,
``results`` summarises runs and writes CSV, ``plots`` draws PNGs and
``runner`` runs policies over workloads (what the CLI and the benchmark use).
"""
