# `make test` installs everything from nothing into .venv and runs the whole suite.
# `make demo` runs the example site (example_project/) at http://127.0.0.1:8000.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch's CPU build; a plain `torch` requirement can pull a CUDA build of several GB.
TORCH_SPEC ?= torch==2.13.0
# make demo PORT=8001 ARTICLES=500 (ARTICLES: load only the N newest on the first run)
PORT ?= 8000
ARTICLES ?=

.PHONY: install browser test lint bench demo clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# The browser test drives Debian's Chromium through its matching chromedriver (nothing is
# downloaded by the test itself). Installed with apt-get when missing and running as root.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing chromium and chromium-driver for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null; \
	else \
		echo "warning: the browser test needs chromium and chromedriver:" \
			"sudo apt-get install chromium chromium-driver" >&2; \
	fi

test: install browser
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -rs

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	HF_HUB_OFFLINE=1 $(PY) benchmarks/encode.py

demo: install
	HF_HUB_OFFLINE=1 $(PY) example_project/demo.py --port $(PORT) $(if $(ARTICLES),--articles $(ARTICLES))

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
