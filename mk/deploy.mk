# Deployment (docker-compose.yml + Dockerfile): a real Compose implementation to validate the
# file in tests/deploy. Debian's docker-compose (v1, Python) only parses and renders the file
# here (`docker-compose config`); no Docker engine is needed or started.
COMPOSE_CLI := /usr/bin/docker-compose

$(COMPOSE_CLI):
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null

.PHONY: compose-cli
compose-cli: $(COMPOSE_CLI)

TEST_PREREQS += compose-cli
