"""Training pairs in and out: import CSV / JSONL files with row-level errors, build pairs
from the site's own content.

File columns (CSV header or JSON keys): ``text_a`` and ``text_b`` (required), ``text_negative``,
``score`` (0..1), ``label``, ``split`` ("train" or "eval"). Unknown columns are an error, so a
typo ("scroe") is not silently dropped. Used by the admin's import page and by
``manage.py sbert_import_pairs``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from django.db import transaction

from ..models import TrainingPair

COLUMNS = ("text_a", "text_b", "text_negative", "score", "label", "split")
REQUIRED = ("text_a", "text_b")


@dataclass
class ImportReport:
    """What an import did: pairs created, and every rejected row with its reason."""

    created: int = 0
    rows: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line or record number, why)

    @property
    def ok(self) -> bool:
        return not self.errors


def detect_format(name: str) -> str:
    """``"jsonl"`` for .jsonl / .json / .ndjson names, else ``"csv"``."""
    return "jsonl" if name.lower().endswith((".jsonl", ".ndjson", ".json")) else "csv"


def _records(stream: IO[str], fmt: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line number, record) pairs; a record that cannot be parsed is an error string."""
    if fmt == "jsonl":
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, f"not valid JSON ({exc.msg})"
                continue
            yield number, value if isinstance(value, dict) else "not a JSON object"
        return
    reader = csv.DictReader(stream)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        yield 1, f"the header lacks {', '.join(missing)} (columns: {', '.join(COLUMNS)})"
        return
    for record in reader:
        yield reader.line_num, {k: v for k, v in record.items() if k is not None}


def parse_record(record: dict[str, Any], *, split: str = "train", source: str = "") -> TrainingPair:
    """One pair from one record; ``ValueError`` says what is wrong with it."""
    unknown = set(record) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown column(s) {sorted(unknown)}; expected {', '.join(COLUMNS)}")
    texts = {}
    for name in ("text_a", "text_b", "text_negative", "label"):
        value = record.get(name)
        value = "" if value is None else value
        if not isinstance(value, str):
            raise ValueError(f"{name} must be text, got {value!r}")
        texts[name] = value.strip()
    for name in REQUIRED:
        if not texts[name]:
            raise ValueError(f"{name} is empty")
    raw_score = record.get("score")
    score = None
    if raw_score not in (None, ""):
        try:
            score = float(raw_score)
        except (TypeError, ValueError):
            raise ValueError(f"score {raw_score!r} is not a number") from None
        if not math.isfinite(score) or not 0 <= score <= 1:
            raise ValueError(f"score {raw_score!r} is outside [0, 1]; scale scores to 0..1")
    row_split = (record.get("split") or split).strip()
    if row_split not in ("train", "eval"):
        raise ValueError(f"split {row_split!r} must be 'train' or 'eval'")
    return TrainingPair(
        text_a=texts["text_a"],
        text_b=texts["text_b"],
        text_negative=texts["text_negative"],
        label=texts["label"],
        score=score,
        split=row_split,
        source=source,
    )


def import_pairs(
    stream: IO[str] | IO[bytes],
    fmt: str = "csv",
    *,
    split: str = "train",
    source: str = "",
    skip_invalid: bool = False,
    batch_size: int = 1000,
) -> ImportReport:
    """Read pairs from a CSV or JSONL stream and save them.

    All or nothing by default: if any row is bad nothing is saved and the report lists every
    bad row, so the fixed file can be imported again without duplicates. ``skip_invalid``
    saves the good rows and reports the rest.
    """
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"Unknown format {fmt!r}; use 'csv' or 'jsonl'.")
    text = stream.read()
    if isinstance(text, bytes):
        text = text.decode("utf-8-sig")
    report = ImportReport()
    good: list[TrainingPair] = []
    for number, record in _records(io.StringIO(text, newline=""), fmt):
        report.rows += 1
        if isinstance(record, str):
            report.errors.append((number, record))
            continue
        try:
            good.append(parse_record(record, split=split, source=source))
        except ValueError as exc:
            report.errors.append((number, str(exc)))
    if report.errors and not skip_invalid:
        return report
    with transaction.atomic():
        TrainingPair.objects.bulk_create(good, batch_size=batch_size)
    report.created = len(good)
    return report


def content_pairs(
    model: Any,
    field_a: str,
    field_b: str,
    *,
    eval_share: float = 0.1,
    seed: int = 0,
    source: str | None = None,
    queryset: Iterable[Any] | None = None,
) -> int:
    """Positive pairs (``field_a`` <-> ``field_b``, e.g. title <-> body) from a model's rows.

    A seeded ``eval_share`` of them goes to the eval split. Returns how many were created.
    """
    rows = queryset if queryset is not None else model._default_manager.order_by("pk")
    source = source or f"{model._meta.label}:{field_a}->{field_b}"
    rng = random.Random(seed)
    pairs = []
    for row in rows:
        a, b = str(getattr(row, field_a) or "").strip(), str(getattr(row, field_b) or "").strip()
        if a and b:
            split = "eval" if rng.random() < eval_share else "train"
            pairs.append(TrainingPair(text_a=a, text_b=b, split=split, source=source))
    TrainingPair.objects.bulk_create(pairs, batch_size=1000)
    return len(pairs)
