# Two commands on a fresh machine: `make demo` and `make test` (both set up .venv first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# test processes (pytest-xdist): auto, one worker more than the cores as 6 GiB each of the free memory allows
# (tests/parallel.py: 3 on 2 cores; 9-10 minutes from a fresh clone); 0 runs the suite in this one process (~15)
TEST_WORKERS ?= auto

.PHONY: install demo test unit e2e serve clean

# compile each module once, on its first use (see the install rule)
export PYTHONDONTWRITEBYTECODE :=

install: $(STAMP)

# torch==2.13.0 comes from wherever pip's configuration finds it (a local CPU wheel: a plain PyPI torch is the
# multi-GB CUDA build); uv installs it and the rest in parallel (~17 s on 2 cores, where pip took 55-80 s).
# No bytecode is compiled ahead: each module is compiled on its first import and kept (PYTHONDONTWRITEBYTECODE is
# cleared for the targets below), so only what runs is compiled, once.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv
	rm -rf $(VENV)/wheels && $(PY) -m pip download -q --no-deps -d $(VENV)/wheels torch==2.13.0
	$(VENV)/bin/uv pip install -q --python $(PY) $(VENV)/wheels/torch-*.whl -e '.[test]'
	rm -rf $(VENV)/wheels
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
