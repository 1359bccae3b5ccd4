"""Benchmarks: performance targets reported as ratios measured side by side."""
