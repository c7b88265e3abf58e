"""What a process serves now: its pid, the version its next search or indexing task uses, and
the heavy libraries it has imported (``benchmarks.memory --layouts``)."""

from __future__ import annotations

import os
import sys

from django_sbert.conf import sbert_settings
from django_sbert.serving import serving_record


def probe() -> dict[str, object]:
    """A web process searches with the version of the search database (the replica); a
    worker indexes with the primary's. Both through the process's cached read, as they do."""
    alias = sbert_settings.SEARCH["DATABASE"]
    return {
        "pid": os.getpid(),
        "search_version": serving_record("default", using=alias).version,
        "index_version": serving_record("default").version,
        "heavy": [m for m in ("torch", "onnxruntime", "transformers") if m in sys.modules],
    }
