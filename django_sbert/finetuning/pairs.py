"""Training pairs in and out: import CSV / JSONL files with row-level errors, build pairs
from the site's own content.

File columns (CSV header or JSON keys): ``text_a`` and ``text_b`` (required), ``text_negative``,
``score`` (0..1), ``label``, ``split`` ("train" or "eval"). Unknown columns are an error, so a
typo ("scroe") is not silently dropped. Used by the admin's import page and by
``manage.py sbert_import_pairs``.

Whatever a file holds, the import answers with a report, never a database error: a problem
with a row (a label longer than its column, a NUL character, a lone surrogate) is a row error;
a problem with the whole file (larger than ``MAX_FILE_BYTES``, not
UTF-8) is a ``PairsImportError``, raised before anything is saved.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from django.db import transaction

from ..exceptions import PairsImportError
from ..models import TrainingPair

COLUMNS = ("text_a", "text_b", "text_negative", "score", "label", "split")
REQUIRED = ("text_a", "text_b")
TEXT_COLUMNS = ("text_a", "text_b", "text_negative", "label")
SETTING = "finetuning.pairs.MAX_FILE_BYTES"
MAX_FILE_BYTES: int | None = 20 * 1024 * 1024  # the largest pairs file an import reads
LISTED_LINES = 5  # bad lines a "not UTF-8" message names before "and N more"


def max_length(column: str) -> int | None:
    """How many characters ``TrainingPair.<column>`` holds (``None``: no limit)."""
    return TrainingPair._meta.get_field(column).max_length


def _shown(value: Any, limit: int = 40) -> str:
    """``repr(value)``, cut short: a report echoes values without echoing a whole file."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


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


def max_file_bytes() -> int | None:
    """The largest pairs file an import reads (``MAX_FILE_BYTES``; ``None``: no limit). An
    import holds the whole file in memory: the limit bounds that."""
    return MAX_FILE_BYTES


def check_file_size(size: int) -> None:
    """Raise ``PairsImportError`` when a file of ``size`` bytes is over the limit.

    Callers that know the size (an upload's ``.size``, ``os.stat``) call this before reading
    anything; ``import_pairs`` checks again while it reads, for streams of unknown size.
    """
    limit = max_file_bytes()
    if limit is not None and size > limit:
        raise PairsImportError(
            f"The file has {size} bytes; a pairs file may have at most {limit} ({SETTING}). "
            "Split it into smaller files and import each."
        )


def source_for_file(name: str) -> str:
    """The ``source`` recorded for pairs from a file called ``name``: the name itself when it
    fits the column; else, for a path, its base name; else the name cut to fit, with "\u2026"
    where it was cut and the extension kept, so the source still says what the file was."""
    limit = max_length("source") or len(name)
    name = name.replace("\x00", "")
    if len(name) <= limit:
        return name
    base = os.path.basename(name) or name
    if len(base) <= limit:
        return base
    stem, extension = os.path.splitext(base)
    if len(extension) > 16:  # not an extension but a dot in a long name
        stem, extension = base, ""
    return stem[: limit - len(extension) - 1] + "\u2026" + extension


def clean_source(source: str) -> str:
    """``source`` if it can be stored; ``PairsImportError`` saying why not otherwise."""
    limit = max_length("source")
    if "\x00" in source:
        raise PairsImportError("The source contains a NUL character (\\x00); remove it.")
    if limit is not None and len(source) > limit:
        raise PairsImportError(
            f"The source is {len(source)} characters long; at most {limit} fit; choose a "
            "shorter source name."
        )
    return source


def decode(data: bytes) -> str:
    """The text of a pairs file (UTF-8, with or without a byte order mark).

    ``PairsImportError`` names the lines that are not UTF-8, so the user can find them.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise PairsImportError(
                'The file is UTF-16 text; save it as UTF-8 (in Excel: "CSV UTF-8") and '
                "import it again."
            ) from None
        bad = []
        for number, line in enumerate(data.split(b"\n"), start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                bad.append(number)
        named = ", ".join(str(n) for n in bad[:LISTED_LINES])
        if len(bad) > LISTED_LINES:
            named += f" and {len(bad) - LISTED_LINES} more"
        lines = f"line {named} holds" if len(bad) == 1 else f"lines {named} hold"
        raise PairsImportError(
            f"The file is not UTF-8 text: {lines} bytes that UTF-8 does not allow (the first "
            f'is 0x{data[exc.start]:02x}). Save the file as UTF-8 (in Excel: "CSV UTF-8") '
            "and import it again."
        ) from None


def read_bounded(stream: IO[str] | IO[bytes]) -> str:
    """The whole stream as text, reading at most one unit past the size limit (every import
    of a file: pairs, judgments); ``PairsImportError`` for a larger or undecodable file."""
    limit = max_file_bytes()
    data = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise PairsImportError(
            f"The file has more than {limit} bytes, the most an imported file may have "
            f"({SETTING}). Split it into smaller files and import each."
        )
    return decode(data) if isinstance(data, bytes) else data


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
            except RecursionError:
                yield number, "not valid JSON (nested too deeply)"
                continue
            except ValueError:  # an integer longer than sys.get_int_max_str_digits()
                yield number, "not valid JSON (a number with too many digits)"
                continue
            yield number, value if isinstance(value, dict) else "not a JSON object"
        return
    reader = csv.DictReader(stream)
    try:
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            yield 1, f"the header lacks {', '.join(missing)} (columns: {', '.join(COLUMNS)})"
            return
        for record in reader:
            yield reader.line_num, {k: v for k, v in record.items() if k is not None}
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit(); the rest is unread
        yield reader.line_num, f"not valid CSV ({exc}); the lines after it were not read"


def _check_text(name: str, value: str) -> None:
    """``ValueError`` for text the database cannot store in column ``name``."""
    if "\x00" in value:
        raise ValueError(
            f"{name} contains a NUL character (\\x00), which the database cannot store; "
            "remove it from the file."
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{name} is not valid Unicode (a lone surrogate such as \\ud800); fix the text."
        ) from None
    limit = max_length(name)
    if limit is not None and len(value) > limit:
        raise ValueError(
            f"{name} is {len(value)} characters long; at most {limit} fit. Shorten it."
        )


def parse_record(record: dict[str, Any], *, split: str = "train", source: str = "") -> TrainingPair:
    """One pair from one record, built but not saved; ``ValueError`` says what is wrong with
    it, including any value the database would refuse (too long for its column, NUL)."""
    unknown = set(record) - set(COLUMNS)
    if unknown:
        names = ", ".join(_shown(name) for name in sorted(unknown, key=str)[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise ValueError(f"unknown column(s) [{names}]{more}; expected {', '.join(COLUMNS)}")
    texts = {}
    for name in TEXT_COLUMNS:
        value = record.get(name)
        value = "" if value is None else value
        if not isinstance(value, str):
            raise ValueError(f"{name} must be text, got {_shown(value)}")
        texts[name] = value.strip()
        _check_text(name, texts[name])
    for name in REQUIRED:
        if not texts[name]:
            raise ValueError(f"{name} is empty")
    raw_score = record.get("score")
    score = None
    if raw_score not in (None, ""):
        if isinstance(raw_score, bool):  # JSON true is not 1.0
            raise ValueError(f"score {raw_score!r} is not a number")
        try:
            score = float(raw_score)
        except (TypeError, ValueError):
            raise ValueError(f"score {_shown(raw_score)} is not a number") from None
        except OverflowError:  # a JSON integer too large for a float
            score = math.inf
        if not math.isfinite(score) or not 0 <= score <= 1:
            raise ValueError(f"score {_shown(raw_score)} is outside [0, 1]; scale scores to 0..1")
    row_split = record.get("split") or split
    if not isinstance(row_split, str):
        raise ValueError(f"split must be text, got {_shown(row_split)}")
    row_split = row_split.strip()
    if row_split not in ("train", "eval"):
        raise ValueError(f"split {_shown(row_split)} must be 'train' or 'eval'")
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
    saves the good rows and reports the rest. A byte stream is decoded as UTF-8.

    Raises ``PairsImportError``, with nothing saved, for a file over
    ``MAX_FILE_BYTES`` (read no further than that), a byte stream
    that is not UTF-8, or a ``source`` that does not fit its column (see ``source_for_file``).
    """
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"Unknown format {fmt!r}; use 'csv' or 'jsonl'.")
    source = clean_source(source)
    text = read_bounded(stream)
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
