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
