"""The example project's committed migrations match its models (a newcomer's `migrate` is
complete, and `makemigrations` has nothing to add)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.example.conftest import ROOT

pytestmark = pytest.mark.example


def test_example_migrations_are_complete(tmp_path: Path) -> None:
    env = {**os.environ, "DEMO_VAR_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the example's own settings, this session's database
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT / "example_project",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"missing migrations:\n{result.stdout}\n{result.stderr}"
