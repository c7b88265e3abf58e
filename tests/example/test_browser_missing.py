"""A machine without Chromium runs the suite all the same: the browser tests skip, saying how
to install what they need, instead of failing after minutes of set-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.example.conftest import chromium_paths


def test_without_chromium_the_browser_tests_skip_and_name_the_packages(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: neither program is found
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium chromium-driver"):
        chromium_paths()


def test_with_both_programs_their_paths_are_returned(monkeypatch, tmp_path: Path):
    for name in ("chromium", "chromedriver"):
        program = tmp_path / name
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium_paths() == (str(tmp_path / "chromium"), str(tmp_path / "chromedriver"))
