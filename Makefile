# Switchyard — `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test deps engine bench clean-var

$(STAMP): requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	@touch $(STAMP)

deps: $(STAMP)

engine:
	scripts/install_engine.sh

run: $(STAMP)
	$(PY) scripts/run.py

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench

clean-var:
	rm -rf var/
