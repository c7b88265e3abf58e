# `make test` installs everything from nothing into .venv and runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch's CPU build; a plain `torch` requirement can pull a CUDA build of several GB.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install test lint bench clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed

test: install
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -rs

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	HF_HUB_OFFLINE=1 $(PY) benchmarks/encode.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
