"""Wagtail's own backend test suite (modelsearch's ``BackendTests``, tests/wagtail/suite) on the
backend in each mode, beside Wagtail's database backend, in a subprocess with the suite's
settings: on this Wagtail, on Wagtail 7 (a small virtualenv over this one), and with the real
model for the tests that differ by design. docs/wagtail.md's table says the same as
``differences.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from tests.wagtail.suite.differences import DIFFERS, OPEN

ROOT = Path(__file__).resolve().parents[2]
SUITE_TESTS = 120  # BackendTests in modelsearch 1.3 (Wagtail 7.1 to 8.x)
WAGTAIL_7 = "wagtail==7.4.4"


def run_suite(python: str, tmp_path: Path, *labels: str, **env: str) -> dict:
    """Run tests/wagtail/suite/run.py; its JSON report (it must exit 0: nothing failed)."""
    report = tmp_path / f"suite-{uuid.uuid4().hex[:8]}.json"
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SBERT_SUITE_DATABASE": f"test_wagtail_suite_{uuid.uuid4().hex[:8]}",
        **env,
    }
    command = [python, "-m", "tests.wagtail.suite.run", "--json", str(report), "-v", "0", *labels]
    done = subprocess.run(
        command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=900
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    print(output[output.rfind("Wagtail ") :])  # the summary, for -s and the CI log
    return json.loads(report.read_text())


def check(report: dict) -> None:
    summary = report["summary"]
    assert (
        summary["WagtailDatabaseBackend"]["passed"] + summary["WagtailDatabaseBackend"]["skipped"]
        == SUITE_TESTS
    )
    for cls, mode in (("SbertKeyword", "keyword"), ("SbertVector", "vector"),
                      ("SbertHybrid", "hybrid")):  # fmt: skip
        counts = summary[cls]
        assert counts["failed"] == 0 and counts["skipped"] == 0, (cls, counts)
        assert counts["differs"] == len(DIFFERS[mode]), (cls, counts)
        assert counts["open"] == len(OPEN[mode]), (cls, counts)
        assert counts["passed"] + counts["differs"] + counts["open"] == SUITE_TESTS


@pytest.mark.heavy
def test_wagtails_backend_suite_passes_or_differs_by_design(tmp_path):
    check(run_suite(sys.executable, tmp_path))


@pytest.mark.slow
def test_what_differs_by_design_is_right_by_meaning(tmp_path):
    """With all-MiniLM-L6-v2, each test that differs by design passes on the first N results,
    N the number of objects holding the words."""
    labels = [
        f"tests.wagtail.suite.backends.{cls}.{test}"
        for cls, mode in (("SbertVector", "vector"), ("SbertHybrid", "hybrid"))
        for test in DIFFERS[mode]
    ]
    report = run_suite(sys.executable, tmp_path, *labels, SBERT_SUITE_MODEL="minilm")
    assert {cls: counts["passed"] for cls, counts in report["summary"].items()} == {
        "SbertVector": len(DIFFERS["vector"]),
        "SbertHybrid": len(DIFFERS["hybrid"]),
    }


@pytest.mark.packaging
def test_wagtails_backend_suite_on_wagtail_7(tmp_path):
    """A virtualenv holding only Wagtail 7.4 over this one's packages (a .pth file), so torch
    and the rest are not installed again."""
    venv = tmp_path / "wagtail7"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    parent = sysconfig.get_paths()["purelib"]
    (Path(site) / "sbert_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site,
         WAGTAIL_7],
        check=True,
    )  # fmt: skip
    report = run_suite(python, tmp_path)
    assert report["wagtail"].startswith("7.")
    check(report)


def test_the_docs_table_lists_what_differs_and_what_is_open():
    """One line per test and mode group, in docs/wagtail.md, as differences.py says."""
    text = (ROOT / "docs" / "wagtail.md").read_text()
    table = text[text.index("## Wagtail's backend tests that differ, and why") :]
    rows = re.findall(r"^\| `(test_\w+)` \| ([a-z, ]+) \| (.+?) \|", table, re.MULTILINE)
    documented = {(test, mode.strip()) for test, modes, _ in rows for mode in modes.split(",")}
    listed = {(test, mode) for lists in (DIFFERS, OPEN) for mode in lists for test in lists[mode]}
    assert documented == listed
