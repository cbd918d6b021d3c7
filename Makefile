# Every target sets itself up on a fresh machine: venv, the project, Kafka's jars, Chromium.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KAFKA_STAMP := .cache/kafka/.resolved
PYTEST_ARGS ?= --durations=15
SCENARIO ?= demo-storm

.PHONY: setup test lint unit demo broker clean chromium bench

setup: $(STAMP) $(KAFKA_STAMP) chromium
	@echo "setup: ready (venv in $(VENV), Kafka jars in .cache/kafka)"

$(STAMP): pyproject.toml
	@echo "setup: creating $(VENV) and installing the project (first time takes a few minutes)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip
	@$(BIN)/pip install -q -e '.[dev,container]'
	@touch $(STAMP)

$(KAFKA_STAMP): $(STAMP)
	@echo "setup: resolving Apache Kafka's artifacts from Maven Central (cached in .cache/kafka)"
	@$(BIN)/harness broker --fetch-only
	@touch $(KAFKA_STAMP)

# Browser tests drive Debian's Chromium; Playwright never downloads a browser of its own.
# Debian packages the tests use: Chromium (browser tests, driven by Playwright, which never
# downloads a browser of its own), HAProxy (PROXY-protocol scenarios) and docker-compose
# (validates compose/ offline; there is no Docker engine here).
DEB_PACKAGES := chromium haproxy docker-compose
chromium:
	@missing=""; for c in $(DEB_PACKAGES); do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	  || echo "setup: could not install$$missing; the tests that need them will be skipped"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: setup lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

demo: setup
	$(BIN)/harness run $(SCENARIO)

broker: setup
	$(BIN)/harness broker

clean:
	rm -rf $(VENV) .cache runs

bench: setup
	$(BIN)/python -m bench.quota_engine
	$(BIN)/python -m bench.acceptor
	$(BIN)/python -m bench.generator
	$(BIN)/python -m bench.analysis
