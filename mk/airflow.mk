# Airflow side: headless Chromium for the browser test, the demo, and stopping it.
CHROMIUM := /usr/bin/chromium

# Debian's chromium (Playwright drives it via executable_path; never `playwright install`).
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null

.PHONY: chromium
chromium: $(CHROMIUM)

TEST_PREREQS += chromium

# ---------------------------------------------------------------- demo
# Airflow home of the demo (git-ignored); DEMO_PORT to use another port than 8080.
AIRFLOW_DEMO_HOME := $(CURDIR)/.airflow
DEMO_PORT ?= 8080

.PHONY: demo stop airflow-status demo-soak
demo: setup
	$(VENV)/bin/python -m msgdedup.orchestration.demo --home $(AIRFLOW_DEMO_HOME) --port $(DEMO_PORT)

# The demo's start-up and backfill creation 5 times from clean homes (temporary, free ports),
# then an interrupted demo run again (docs/airflow.md). About 10 minutes; not part of make test.
demo-soak: setup
	$(VENV)/bin/python scripts/demo_startup_soak.py --runs 5

# Stops exactly the processes the demo started (pid files in .airflow/run/).
stop:
	@if [ -x $(VENV)/bin/python ]; then \
	  $(VENV)/bin/python -m msgdedup.orchestration.local_airflow stop --home $(AIRFLOW_DEMO_HOME) --port $(DEMO_PORT); \
	else echo "nothing to stop"; fi

airflow-status:
	@$(VENV)/bin/python -m msgdedup.orchestration.local_airflow status --home $(AIRFLOW_DEMO_HOME) --port $(DEMO_PORT)
