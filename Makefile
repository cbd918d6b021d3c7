# Every target sets itself up on a fresh machine: venv, the project, Kafka's jars, Chromium.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KAFKA_STAMP := .cache/kafka/.resolved
PYTEST_ARGS ?= --durations=15
SCENARIO ?= demo-storm

.PHONY: setup test test-fast lint unit demo broker clean chromium spark-cds bench images compose-demo kafka-reference

setup: $(STAMP) $(KAFKA_STAMP) chromium spark-cds
	@echo "setup: ready (venv in $(VENV), Kafka jars in .cache/kafka)"

# the analysis JVM's class archive (analysis/cds.py): made once, in .cache/spark-cds
spark-cds: $(STAMP)
	@$(BIN)/python -m analysis.cds

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

# Debian packages the tests use, as command:package: Chromium (browser tests, driven by
# Playwright, which never downloads a browser of its own), HAProxy (PROXY-protocol scenarios),
# docker.io (dockerd: the container launcher, compose; .ci/run starts it when none answers),
# docker-compose (compose/) and mmdebstrap (the images' Debian root filesystems; no registry).
DEB_PACKAGES := chromium:chromium haproxy:haproxy dockerd:docker.io docker-compose:docker-compose \
	mmdebstrap:mmdebstrap
chromium:
	@missing=""; for cp in $(DEB_PACKAGES); do command -v $${cp%%:*} >/dev/null 2>&1 || missing="$$missing $${cp#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	  || echo "setup: could not install$$missing; the tests that need them will be skipped"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The suite runs on workers (pytest-xdist; tests/conftest.py keeps a module on one worker):
# its tests wait on brokers, loads and JVMs more than they compute, so one worker more than
# the CPUs keeps them busy. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: setup lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

# the edit loop: no JVM, no Spark (pure logic, loopback sockets, fuzz), on the same workers
# (63 s against 88-97 s in one process here)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "unit or local or fuzz" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# With a Docker engine the broker runs in a container (the image is built on first use, or by
# `make images`); without one, from the cached jars. The run's first lines say which.
demo: setup
	$(BIN)/harness run $(SCENARIO)

# The Kafka and harness images, built locally from Debian packages and the cached jars (no
# registry); reused when present. Needs a Docker engine (.ci/run starts one).
# KAFKA_VERSION=X.Y.Z builds that release's Kafka image (a KRaft release, 3.3 or newer), which
# `harness broker/run --kafka-version X.Y.Z --launcher container` then runs.
KAFKA_VERSION ?=
images: setup
	$(BIN)/python -m broker.images $(if $(KAFKA_VERSION),--kafka-version $(KAFKA_VERSION))

# compose/: Kafka, the acceptor, a Locust master and two workers from the local images run a
# catalog scenario (single-phase, e.g. ci-gate, fleet-restart, broker-rate) headless; the
# history is then checked by `harness analyze`.
COMPOSE_SCENARIO ?= ci-gate
compose-demo: images
	$(BIN)/python compose/demo.py $(COMPOSE_SCENARIO)

broker: setup
	$(BIN)/harness broker

clean:
	rm -rf $(VENV) .cache runs

# The catalog against Kafka's own enforcement (one broker run per scenario, ~3 min each),
# next to the acceptor's newest runs; the table goes to docs/kafka-reference.md.
kafka-reference: setup
	$(BIN)/python -m bench.kafka_reference $(KAFKA_REFERENCE_ARGS)

bench: setup
	$(BIN)/python -m bench.quota_engine
	$(BIN)/python -m bench.acceptor
	$(BIN)/python -m bench.generator
	$(BIN)/python -m bench.analysis
