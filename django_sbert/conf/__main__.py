"""``python -m django_sbert.conf [--write docs/settings.md]``: print or write the reference."""

from __future__ import annotations

import sys
from pathlib import Path

from .reference import BEGIN, reference_tables, write_reference

if sys.argv[1:2] == ["--write"]:
    page = Path(sys.argv[2])
    page.write_text(write_reference(page.read_text()))
else:
    for part, table in reference_tables().items():
        print(f"{BEGIN.format(part)}\n{table}\n")
