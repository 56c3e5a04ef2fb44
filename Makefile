# Two commands matter: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
# Spark's Python workers must run the venv's interpreter (the project is installed there).
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python

# Feature fragments (mk/*.mk) add their own targets and may append to TEST_PREREQS.
TEST_PREREQS :=
-include mk/*.mk

.PHONY: setup test lint clean help
.DEFAULT_GOAL := help

help:
	@echo "make setup   build .venv from uv.lock, and the project's jar"
	@echo "make test    set up, then run the whole test suite"
	@echo "make demo    set up, generate sample partitions, run them through Airflow"
	@echo "make stop    stop every process the demo started"
	@echo "make bench   benchmarks (see README)"

# uv itself is pinned and installed into .tools/, so nothing has to be installed by hand.
$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: every Spark driver and Python worker imports pyspark, pandas and (the gate)
# Great Expectations; without .pyc files, e.g. under PYTHONDONTWRITEBYTECODE=1 or a read-only
# venv, each process compiles them from source again (about 5 s for Great Expectations alone).
$(VENV)/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --frozen --compile-bytecode
	scripts/bind_spark_to_venv.sh $(VENV)
	@touch $@

# The project's JVM code (src/msgdedup/jvm), compiled against the venv's pyspark.
JVM_JAR := src/msgdedup/jvm/msgdedup-jvm.jar
$(JVM_JAR): $(wildcard src/msgdedup/jvm/*.java) scripts/build_jvm.sh $(VENV)/.synced
	scripts/build_jvm.sh $(VENV)

setup: $(VENV)/.synced $(JVM_JAR)

test: setup lint $(TEST_PREREQS)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# ruff: pyflakes, pycodestyle, bugbear and Airflow's AIR rules (pyproject.toml [tool.ruff]).
lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache $(JVM_JAR)

