"""The tutorial's app, then each how-to that builds on it, pass ``manage.py check`` as printed.

The files of docs/tutorial.md are written into a project made by ``startproject mysite`` and
``startapp news`` (the tutorial's own commands), then each how-to's files in reading order
(tests/docs/tutorial_app.py), and ``manage.py check`` runs after every page: a how-to that
registers fields the model lacks, or routes a search page whose modes need a column the
field lacks (check E015), fails here in seconds. tests/example/test_tutorial.py runs the same
pages with a worker, the real model and requests to the pages they build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.tutorial_app import TUTORIAL, howtos, project_files, write

HOWTOS = howtos()


def manage(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_"))}
    env.pop("DATABASE_URL", None)
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_the_howtos_that_build_on_the_tutorial_are_found() -> None:
    assert [p.name for p in HOWTOS] == ["search-page.md", "rest-api.md"]


@pytest.mark.slow
def test_each_page_leaves_a_project_that_passes_check(tmp_path: Path) -> None:
    made = manage(tmp_path, "-m", "django", "startproject", "mysite", ".")
    assert made.returncode == 0, made.stderr
    made = manage(tmp_path, "manage.py", "startapp", "news")
    assert made.returncode == 0, made.stderr
    failures = []
    for page in [TUTORIAL, *HOWTOS]:
        files = project_files(page)
        assert files or page != TUTORIAL, f"{page.name} lost its files"
        for item in files:
            # A how-to's file is one the tutorial made: its app's, or its project's.
            if page != TUTORIAL and item.path.split("/")[0] not in ("news", "mysite"):
                failures.append(f"{page.name}: {item.path} is not a file of the tutorial's app")
            write(tmp_path, item)
        checked = manage(tmp_path, "manage.py", "check", "--fail-level", "ERROR")
        if checked.returncode != 0:
            failures.append(f"after {page.name}:\n{checked.stdout}{checked.stderr[-3000:]}")
    assert not failures, "\n".join(failures)
