# Two commands on a fresh machine: `make demo` and `make test` (both set up .venv first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# test processes (pytest-xdist): auto, one worker more than the cores as 6 GiB each of the free memory allows
# (tests/parallel.py: 3 on 2 cores; ~10 minutes from a fresh clone); 0 runs the suite in this one process (~15)
TEST_WORKERS ?= auto

.PHONY: install demo test unit e2e serve clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	$(VENV)/bin/voxlane doctor
	touch $(STAMP)

demo: install
	$(VENV)/bin/voxlane demo -o demo.wav

test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests

unit: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/unit

e2e: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/e2e

serve: install
	$(VENV)/bin/voxlane serve

clean:
	rm -rf $(VENV) .cache demo.wav
