# One virtualenv, .venv, made on first use. `make run` is the demo; `make test` the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all run install image version test-tools js-client test unit integration lint format typecheck check bench fuzz nemesis proto clean docs-settings

all: check

# The slim client (clients/python) first, in the same pip run: the service depends on it
# by name, and pip takes it from that path instead of looking for it on PyPI.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./clients/python -e '.[demo,dev,audit]'
	touch $(STAMP)

install: $(STAMP)

# Chromium and promtool for the browser and Prometheus tests, from apt where the machine
# allows it; otherwise those tests skip, each with one line saying what to install.
test-tools: js-client
	deploy/install-test-tools.sh

# The JavaScript client (clients/js): its npm packages from the lock file, then compiled
# (tsc type-checks it); tests/integration/test_js_client.py runs it with node.
JS := clients/js
JS_DEPS := $(JS)/node_modules/.package-lock.json
JS_BUILT := $(JS)/dist/.built
js-client: $(JS_BUILT)

$(JS_DEPS): $(JS)/package.json $(JS)/package-lock.json
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error

$(JS_BUILT): $(JS_DEPS) $(JS)/tsconfig.json $(wildcard $(JS)/src/*.ts $(JS)/test/*.ts)
	cd $(JS) && npm run --silent build
	touch $(JS_BUILT)

run: install
	$(BIN)/kafka-timers demo

# PYTEST_ARGS: e.g. --refuse-skips (CI), -m 'not fault', -x. Two parts (--part, see
# tests/conftest.py): first the tests that may run beside another, TEST_PROCESSES at a
# time (pytest-xdist; --dist loadfile keeps a module in one process, so the stacks its
# tests share stay shared; modules go out in the conftest's order, the fault modules
# first), then those marked `serial` alone: they gate on a time the
# machine measures. A test process that dies ends the parallel part at once, naming the
# test it was running (--max-worker-restart=0: with --dist loadfile, pytest-xdist can wait
# for ever on the process that replaces a dead one). Both parts always run; pytest's 5 (nothing selected, as when
# PYTEST_ARGS picks tests of one part only) counts as passed unless both say it.
# 3 on 2 cores: the parallel part waits (for seconds to come due, for groups to settle)
# far more than it computes; 18 of its slowest tests (test_long_horizons, test_debounce,
# test_recurring, test_calendars, test_restart, ...) ran 3 at a time as long as alone,
# each, using a third of a core between them. TEST_PROCESSES=2 for the old pace.
TEST_PROCESSES ?= 3
test: install test-tools
	parallel=0; serial=0; \
	$(BIN)/pytest --part parallel -n $(TEST_PROCESSES) --dist loadfile --max-worker-restart=0 $(PYTEST_ARGS) || parallel=$$?; \
	$(BIN)/pytest --part serial $(PYTEST_ARGS) || serial=$$?; \
	echo "make test: parallel part exit $$parallel, serial part exit $$serial"; \
	case "$$parallel $$serial" in "0 0"|"0 5"|"5 0") exit 0;; *) exit 1;; esac

unit: install js-client
	$(BIN)/pytest tests/unit

integration: install js-client
	$(BIN)/pytest tests/integration

lint: install
	$(BIN)/ruff check app oscillator spark_audit clients/python tests bench deploy fuzz
	$(BIN)/ruff format --check app oscillator spark_audit clients/python tests bench deploy fuzz
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format app oscillator spark_audit clients/python tests bench deploy fuzz
	$(BIN)/ruff check --fix app oscillator spark_audit clients/python tests bench deploy fuzz

typecheck: install js-client
	$(BIN)/mypy
	cd $(JS) && npm run --silent typecheck

check: lint typecheck test

# The settings table in docs/configuration.md, generated from the settings' declarations
# (app/settings); tests/unit/test_settings_table.py fails while it is out of date.
docs-settings: install
	$(BIN)/python -m app.settings.reference

bench: install
	$(BIN)/python -m bench

# Coverage-guided fuzzing of the request path (atheris; the "fuzz" extra), for FUZZ_SECONDS.
# Inputs that reach new code are kept in fuzz/corpus (the unit tests replay them); a
# failing input is written to fuzz/crashes/.
FUZZ_SECONDS ?= 60
fuzz: install
	@$(BIN)/python -c 'import atheris' 2>/dev/null || $(BIN)/pip install --quiet -e '.[fuzz]' \
		|| { echo "make fuzz needs atheris: $(BIN)/pip install atheris (no wheel here: it builds with clang and libFuzzer)"; exit 1; }
	$(BIN)/python fuzz/request_path.py fuzz/corpus -max_total_time=$(FUZZ_SECONDS) \
		-artifact_prefix=fuzz/crashes/

# Random overlapping faults (kill -9, SIGSTOP, broker kill -9, clock jumps, network
# partitions, a full disk) on 3 workers, 2 oscillators and a broker that survives its
# restarts, under a mixed load whose promises are recorded, for NEMESIS_MINUTES; then heal
# and judge the topics against the history (docs/nemesis.md). It prints its seed;
# NEMESIS_SEED=<seed> replays the run's draws. Needs root for its tmpfs.
NEMESIS_MINUTES ?= 60
nemesis: install
	NEMESIS_MINUTES=$(NEMESIS_MINUTES) $(BIN)/python -m tests.nemesis

# After editing the request schema: compile it into the descriptor the worker loads
# (a unit test fails until this is done).
PROTO_DIR := app/core/proto
proto: install
	$(BIN)/python -m grpc_tools.protoc -I $(PROTO_DIR) \
		--descriptor_set_out=$(PROTO_DIR)/future.binpb kafka_timers/v1/future.proto

# The release's version, from pyproject.toml (the one source of it), and the image
# tagged with it: kafka-timers:<version> (docs/deploy.md).
VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= kafka-timers
version:
	@echo $(VERSION)

image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

clean:
	rm -rf $(VENV) $(JS)/node_modules $(JS)/dist .kafka-timers .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
