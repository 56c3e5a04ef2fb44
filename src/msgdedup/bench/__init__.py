"""Benchmarks and scale checks (make bench)."""
