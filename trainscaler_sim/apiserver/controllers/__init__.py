"""Simulated kube-controller-manager and kube-scheduler: in-process controllers
driven by store change events through one manager thread."""
