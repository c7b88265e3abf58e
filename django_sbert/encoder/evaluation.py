"""Deprecated: the former name of ``django_sbert.encoder.metrics``, kept for one release.

``django_sbert.evaluation`` is the wing of judgment lists and stored evaluations; the metrics
moved to ``encoder/metrics.py`` so the name means one thing. Each name read here warns once
and is the one ``metrics`` defines.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import metrics


def __getattr__(name: str) -> Any:
    value = getattr(metrics, name)  # AttributeError for a name metrics lacks, as before
    warnings.warn(
        f"django_sbert.encoder.evaluation is now django_sbert.encoder.metrics (import {name} "
        "from there); the old module goes in the next release.",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
