"""The test matrix: the suite on each supported pair of Python and Django, each pair in a
virtualenv of its own under ``.nox/``.

    nox -s tests                 # every entry, the whole suite each (about 20 min an entry)
    nox -s tests -p 3.13 -- -m "not slow and not example and not packaging"
    nox -s without_onnx          # the encoder paths on a site without the onnx extra

Arguments after ``--`` go to pytest. Each entry installs torch the way the Makefile does
(``make torch VENV=...``): the local CPU wheel when pip has one, otherwise ``TORCH_INDEX_URL``
(PyTorch's CPU index by default). Where neither can be had, as for Python 3.13 on the CI
machines (the local wheel is for 3.11 and PyTorch's index is out of reach),
``TORCH_INDEX_URL=pypi`` takes PyPI's build: the CUDA one, which runs on the CPU but brings
the nvidia-* libraries (about 3.5 GB downloaded, a 4.7 GB virtualenv). Then the package with
every extra, that Django and the ``test`` dependency group.

``without_onnx`` installs every extra but ``onnx`` (ONNX Runtime, onnx, onnxscript: the
``QUERY_RUNTIME`` path for one query) on the oldest entry and runs the encoder-path tests,
``tests/encoder`` and ``tests/serving``: ``QUERY_RUNTIME="auto"`` must serve with torch there,
and ONNX Runtime's own tests skip, saying why.

An interpreter nox does not find on PATH is looked for in ``~/.pyenv/versions`` (pyenv's shims
answer only for the versions pyenv has selected).
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"  # with pip inside: the Makefile's torch install uses it
nox.options.download_python = "never"  # the machines reach package registries only

# (Python, Django): the oldest pair supported and the newest.
MATRIX = [("3.11", "5.2"), ("3.13", "6.1")]
EXTRAS = "api,redis,minilm,onnx,wagtail"
ONNX_PACKAGES = ("onnxruntime", "onnx", "onnxscript")  # the onnx extra's
ROOT = Path(__file__).resolve().parent
PYTEST = ["-q", "-rs", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]


def _release(directory: Path) -> tuple[int, ...]:
    """3.13.0 -> (3, 13, 0); a name that is no plain release sorts first."""
    try:
        return tuple(int(part) for part in directory.name.split("."))
    except ValueError:
        return (-1,)


def _pyenv_interpreters_on_path() -> None:
    """Put pyenv's newest X.Y.Z/bin for each X.Y of MATRIX at the head of PATH."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for python, _ in MATRIX:
        releases = [path for path in versions.glob(f"{python}.*") if _release(path) > (0,)]
        if releases:
            found.append(str(max(releases, key=_release) / "bin"))
    # Before pyenv's shims, which fail for a version pyenv has not selected.
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_pyenv_interpreters_on_path()


def _install(session: nox.Session, extras: str, django: str) -> None:
    """torch as the Makefile installs it, then the package with ``extras``, Django and the
    ``test`` group."""
    session.install("pip>=25.1")
    session.run(
        "make",
        "--no-print-directory",
        "-C",
        str(ROOT),
        "torch",
        f"VENV={session.virtualenv.location}",
        external=True,
    )
    groups = nox.project.dependency_groups(nox.project.load_toml(ROOT / "pyproject.toml"), "test")
    session.install("-e", f".[{extras}]", f"Django~={django}.0", *groups)
    session.run("python", "-c", "import django, torch; print('Django', django.__version__, "
                "'torch', torch.__version__)")  # fmt: skip


@nox.session
@nox.parametrize(
    ("python", "django"),
    MATRIX,
    ids=[f"py{python}-django{django}" for python, django in MATRIX],
)
def tests(session: nox.Session, django: str) -> None:
    """The suite (or the pytest arguments given after ``--``) on one Python and Django."""
    _install(session, EXTRAS, django)
    session.run("python", "-m", "pytest", *PYTEST, *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session(python=MATRIX[0][0])
def without_onnx(session: nox.Session) -> None:
    """tests/encoder and tests/serving (or the pytest arguments after ``--``) installed without
    the onnx extra, which nothing else may bring in."""
    extras = ",".join(extra for extra in EXTRAS.split(",") if extra != "onnx")
    _install(session, extras, MATRIX[0][1])
    found = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in sys.argv[1:]))"
    session.run("python", "-c", found, *ONNX_PACKAGES)  # fails when one is installed
    paths = session.posargs or ["tests/encoder", "tests/serving", "-m", "not slow"]
    session.run("python", "-m", "pytest", *PYTEST, *paths, env={"HF_HUB_OFFLINE": "1"})
