# Benchmarks (docs/benchmarks.md): `make bench` (small, about 45 min on a 2-core machine),
# `make bench SCALE=large` (adds 10M messages; hours), `make bench SCALE=tiny` (smoke run).
# BENCH_ARGS passes more options to the harness, e.g. BENCH_ARGS="--no-airflow --history-batches 6".
SCALE ?= small
BENCH_WORK ?= $(or $(TMPDIR),/tmp)/msgdedup-bench
BENCH_ARGS ?=

.PHONY: bench
bench: setup
	$(VENV)/bin/python -m msgdedup.bench.harness --scale $(SCALE) --work $(BENCH_WORK) $(BENCH_ARGS)
