"""README.md's quick start, followed to the letter in a fresh project.

The code is read from the README itself, so the README cannot drift from what works:
``django-admin startproject proj`` and ``startapp news`` make the "existing project"; each
Python block of the quick start is added to the file named on its first line; the shell block
runs (``makemigrations``, ``migrate``, and a real Celery worker); the ``>>>`` lines run in
``manage.py shell``, and their printed result must match the README's up to rounding.

What the test adds, as any real project has it: ``news`` in INSTALLED_APPS, a PostgreSQL
database (a new one on this test session's server), and the broker URL pointed at a
filesystem folder instead of the README's Redis, so no Redis database is shared.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.example.conftest import ROOT
from tests.settings import database_from_url

pytestmark = [pytest.mark.example, pytest.mark.slow]

README = ROOT / "README.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def quick_start_blocks() -> list[tuple[str, str]]:
    """(language, code) of each fenced block in the README's "Quick start" section."""
    text = README.read_text()
    start = text.index("## Quick start")
    end = text.index("\n## ", start + 1)
    return FENCE.findall(text[start:end])


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def shell_command(line: str) -> list[str]:
    """A README shell line as an argv, with ``python``/``celery`` from this virtualenv."""
    words = line.split("#")[0].split()
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "celery":
        return [sys.executable, "-m", "celery", *words[1:]]
    raise AssertionError(f"unexpected command in the README quick start: {line!r}")


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


def test_readme_quick_start(tmp_path: Path, database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    project = tmp_path / "site"
    project.mkdir()
    django_admin = [sys.executable, "-m", "django"]
    run([*django_admin, "startproject", "proj", "."], project, env)
    run([sys.executable, "manage.py", "startapp", "news"], project, env)

    # What every real project already has: its app installed, PostgreSQL, a reachable broker.
    broker = tmp_path / "broker"
    broker.mkdir()
    with (project / "proj" / "settings.py").open("a") as settings:
        settings.write(
            "\n# -- added by the test: the project's own app and database --\n"
            'INSTALLED_APPS += ["news"]\n'
            f'DATABASES = {{"default": {database_from_url(database_url)!r}}}\n'
        )

    blocks = quick_start_blocks()
    python_blocks = [code for lang, code in blocks if lang == "python"]
    assert len(python_blocks) >= 4, "the quick start lost its code blocks"
    for code in python_blocks:
        first, _, body = code.partition("\n")
        target = re.match(r"# (\S+\.py)", first)
        assert target, f"a quick start block must start with '# path/to/file.py': {first!r}"
        with (project / target[1]).open("a") as f:
            f.write("\n" + body)
    with (project / "proj" / "settings.py").open("a") as settings:
        settings.write(  # after the README's broker line: a folder instead of Redis
            "\n# -- added by the test: a broker in a temporary folder --\n"
            'CELERY_BROKER_URL = "filesystem://localhost/"\n'
            f"CELERY_BROKER_TRANSPORT_OPTIONS = {{'data_folder_in': {str(broker)!r}, "
            f"'data_folder_out': {str(broker)!r}}}\n"
        )

    (shell_block,) = [code for lang, code in blocks if lang == "sh"]
    worker = None
    try:
        for line in shell_block.strip().splitlines():
            for part in line.split("#")[0].split("&&"):
                command = shell_command(part.strip())
                if command[1:3] == ["-m", "celery"]:
                    log = (tmp_path / "worker.log").open("w")
                    worker = subprocess.Popen(
                        command, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                else:
                    run(command, project, env)

        (console,) = [code for lang, code in blocks if lang == "pycon"]
        statements, expected = _console(console)
        *setup, final = statements
        run([sys.executable, "manage.py", "shell", "-c", "\n".join(setup)], project, env)

        # "a moment later, once the worker has embedded them"
        count = "from news.models import Article\n" + (
            "print(Article.objects.filter(embedding__isnull=False).count())"
        )
        deadline = time.monotonic() + 420  # generous: a second test process shares the CPU
        while (
            _last_line(run([sys.executable, "manage.py", "shell", "-c", count], project, env))
            != "2"
        ):
            assert worker is not None and worker.poll() is None, (
                tmp_path / "worker.log"
            ).read_text()
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(1)

        printed = run(
            [sys.executable, "manage.py", "shell", "-c", f"{setup[0]}\nprint({final})"],
            project,
            env,
        )
        got = ast.literal_eval(_last_line(printed))
        want = ast.literal_eval(expected)
        assert [title for title, _ in got] == [title for title, _ in want]
        for (_, score), (_, shown) in zip(got, want, strict=True):
            assert score == pytest.approx(shown, abs=0.02), (got, want)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=60)


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
