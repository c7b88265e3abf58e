"""General quality of a run's models: STS Spearman on a small file the site names.

A fine-tune for one domain may forget what the base model knew; ``SBERT["TRAINING"]["STS_FILE"]``
(off by default) points at a few hundred scored sentence pairs, and every run measures them
before and after (``general_sts_spearman`` in its metrics, beside the eval split's). The file
is tab-separated: either the STS Benchmark layout (score in the 5th column, sentences in the
6th and 7th) or three columns ``sentence_a<TAB>sentence_b<TAB>score``, any score scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..conf import sbert_settings
from ..encoder.metrics import sts_spearman

METRIC = "general_sts_spearman"


def read_sts_file(path: str | Path) -> list[tuple[str, str, float]]:
    """The scored pairs of an STS file; ``ValueError`` names the first line it cannot read."""
    pairs = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        try:
            if len(columns) >= 7:
                pairs.append((columns[5], columns[6], float(columns[4])))
            elif len(columns) == 3:
                pairs.append((columns[0], columns[1], float(columns[2])))
            else:
                raise ValueError(f"{len(columns)} tab-separated columns")
        except ValueError as exc:
            if number == 1 and len(columns) == 3:
                continue  # a header line: sentence_a, sentence_b, score
            raise ValueError(
                f"{path}, line {number}: expected 'sentence_a<TAB>sentence_b<TAB>score' or the "
                f"STS Benchmark layout ({exc})."
            ) from exc
    if len(pairs) < 2:
        raise ValueError(f"{path}: an STS file needs at least two scored pairs.")
    return pairs


def sts_pairs() -> list[tuple[str, str, float]] | None:
    """The configured file's pairs, or None when ``SBERT["TRAINING"]["STS_FILE"]`` is not set."""
    path = sbert_settings.TRAINING["STS_FILE"]
    return read_sts_file(path) if path else None


def general_quality(encoder: Any, pairs: list[tuple[str, str, float]] | None) -> dict[str, float]:
    """``{"general_sts_spearman": ...}`` for ``pairs``; empty when there are none."""
    return {METRIC: sts_spearman(encoder, pairs)} if pairs else {}
