"""Shared data loading for the benchmarks (../shared/data and ../shared/eval)."""

from __future__ import annotations

import os
from pathlib import Path

SHARED = Path(os.environ.get("SBERT_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def sts_pairs(path: Path) -> list[tuple[str, str, float]]:
    """STS Benchmark rows as (sentence1, sentence2, score / 5); tab-split, no CSV quoting."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        columns = line.split("\t")
        if len(columns) >= 7:
            pairs.append((columns[5], columns[6], float(columns[4]) / 5.0))
    return pairs


def sts_sentences(limit: int) -> list[str]:
    """Unique STSb train sentences, in file order."""
    seen: dict[str, None] = {}
    for a, b, _ in sts_pairs(SHARED / "data/stsbenchmark/sts-train.csv"):
        seen.setdefault(a)
        seen.setdefault(b)
    return list(seen)[:limit]
