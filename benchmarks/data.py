"""Texts the benchmarks share, read from ../shared/data (``common.DATA``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import DATA

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


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
    for a, b, _ in sts_pairs(DATA / "stsbenchmark/sts-train.csv"):
        seen.setdefault(a)
        seen.setdefault(b)
    return list(seen)[:limit]


def corpus_texts(data: Path) -> Iterator[str]:
    """Titles and sentences of the Wikinews articles, then of SciFact's corpus, in file order
    (whitespace collapsed; not filtered, not deduplicated)."""
    for path in sorted((data / "wikinews").glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            yield from _document_texts(json.loads(line))
    for line in (data / "scifact" / "corpus.jsonl").open(encoding="utf-8"):
        yield from _document_texts(json.loads(line))


def _document_texts(doc: dict) -> Iterator[str]:
    yield " ".join(doc["title"].split())
    for sentence in SENTENCE_END.split(doc["text"]):
        yield " ".join(sentence.split())


def scifact_claims(n: int) -> list[str]:
    """The first ``n`` SciFact training claims: questions about the abstracts, in file order."""
    lines = (DATA / "scifact" / "queries-train.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines[:n]]
