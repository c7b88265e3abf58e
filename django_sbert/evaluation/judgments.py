"""Building judgment lists: import CSV, JSON Lines or TREC qrels, or take the eval pairs.

A judgment list grades rows of one model's EmbeddingField for a set of queries: each
``Judgment`` names a row by its pk (as text) and grades it 0 (not relevant) to 3 (perfect).

The file formats (CSV, JSON Lines, TREC qrels with a queries file) and ``doc_ids`` (document
ids mapped to rows) are in docs/howto/measure-search.md. An import is all or nothing, as the
pairs import is: any bad line and nothing is saved, and the report lists every bad line by its
number (``skip_invalid`` saves the rest); a problem with the whole file raises
``JudgmentsImportError``. Used by ``manage.py sbert_import_judgments``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import models, transaction

from ..exceptions import JudgmentsImportError, PairsImportError
from ..finetuning.gate import HEAD_CHARS, PositiveIndex, positive_pairs
from ..finetuning.pairs import read_bounded
from ..indexing import FieldRef, get_ref, light_rows
from ..models import JudgedQuery, Judgment, JudgmentList, TrainingPair

GRADES = range(0, 4)  # 0 not relevant, 1 somewhat, 2 relevant, 3 perfect
PAIR_GRADE = 3  # a pair's text_b is the row that answers its text_a
NEGATIVE_GRADE = 0  # a pair's hard negative is a row judged not relevant
COLUMNS = ("query", "object_pk", "doc_id", "grade")
FORMATS = ("csv", "jsonl", "trec")
QUERY_ID_KEYS = ("_id", "id", "qid", "query_id", "query-id")
QUERY_TEXT_KEYS = ("text", "query")

Source = str | Path | IO[str] | IO[bytes]
DocIds = Mapping[str, Any] | str


@dataclass
class JudgmentsReport:
    """What an import did: queries and judgments saved, and every rejected line with its
    reason (for eval pairs: the pair, by its pk, whose text_b no row holds)."""

    queries: int = 0  # queries created (those the list had are reused)
    judgments: int = 0  # judgments saved (created or regraded)
    rows: int = 0  # records read
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)
    unmatched: list[int] = field(default_factory=list)  # eval pairs whose text_b is no row's

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class _Graded:
    line: int
    query: str
    object_pk: str
    grade: int


# --- reading ---------------------------------------------------------------------------------


def _text(source: Source) -> str:
    """The whole of ``source`` (a path or a stream) as text, within the import size limit."""
    if isinstance(source, str | Path):
        try:
            with open(source, "rb") as stream:
                return _text(stream)
        except OSError as exc:
            raise JudgmentsImportError(f"Cannot read {source}: {exc}") from exc
    try:
        return read_bounded(source)
    except PairsImportError as exc:
        raise JudgmentsImportError(str(exc)) from None


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _jsonl(text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line number, object) of each non-blank line; an error string for a bad line."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            yield number, f"not valid JSON ({getattr(exc, 'msg', exc)})"
            continue
        yield number, value if isinstance(value, dict) else "not a JSON object"


def _csv(text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in ("query", "grade") if c not in header]
        if missing or not {"object_pk", "doc_id"} & set(header):
            lacks = ", ".join(
                missing + ([] if {"object_pk", "doc_id"} & set(header) else ["object_pk or doc_id"])
            )
            yield 1, f"the header lacks {lacks} (columns: query, object_pk or doc_id, grade)"
            return
        for record in reader:
            yield reader.line_num, {k: v for k, v in record.items() if k is not None}
    except csv.Error as exc:
        yield reader.line_num, f"not valid CSV ({exc}); the lines after it were not read"


def _grade(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"grade {value!r} is not a whole number")
    if isinstance(value, str):
        value = value.strip()
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"grade {_shown(value)} is not a whole number from 0 to 3") from None
    if not number.is_integer() or int(number) not in GRADES:
        raise ValueError(
            f"grade {_shown(value)} is not one of 0, 1, 2, 3 (0 not relevant .. 3 perfect); "
            "map your scale onto it"
        )
    return int(number)


def _query_text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"query must be text, got {_shown(value)}")
    text = value.strip()
    if not text:
        raise ValueError("query is empty")
    if "\x00" in text:
        raise ValueError("query contains a NUL character (\\x00); remove it from the file")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("query is not valid Unicode (a lone surrogate such as \\ud800)") from None
    return text


def _record_rows(
    records: Iterable[tuple[int, dict[str, Any] | str]], report: JudgmentsReport
) -> list[tuple[int, str, str, str, int]]:
    """(line, query, "pk" or "doc", the id, grade) of each good record; errors to ``report``."""
    out = []
    for number, record in records:
        report.rows += 1
        if isinstance(record, str):
            report.errors.append((number, record))
            continue
        try:
            unknown = set(record) - set(COLUMNS)
            if unknown:
                names = ", ".join(_shown(n) for n in sorted(unknown, key=str)[:5])
                raise ValueError(f"unknown column(s) [{names}]; expected {', '.join(COLUMNS)}")
            pk, doc = record.get("object_pk"), record.get("doc_id")
            pk = None if pk in (None, "") else pk
            doc = None if doc in (None, "") else doc
            if (pk is None) == (doc is None):
                raise ValueError("give one of object_pk and doc_id")
            kind, value = ("pk", pk) if pk is not None else ("doc", doc)
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise ValueError(
                    f"{'object_pk' if kind == 'pk' else 'doc_id'} {_shown(value)} is not an id"
                )
            out.append(
                (
                    number,
                    _query_text(record.get("query")),
                    kind,
                    str(value).strip(),
                    _grade(record.get("grade")),
                )
            )
        except ValueError as exc:
            report.errors.append((number, str(exc)))
    return out


# --- rows ------------------------------------------------------------------------------------


def _ref(judgment_list: JudgmentList) -> FieldRef:
    model = judgment_list.content_type.model_class()
    if model is None:
        raise JudgmentsImportError(
            f"The model of judgment list {judgment_list.name!r} is no longer installed."
        )
    try:
        return get_ref(model._meta.label, judgment_list.field)
    except LookupError as exc:
        raise JudgmentsImportError(f"Judgment list {judgment_list.name!r}: {exc}") from exc


def _existing_pks(ref: FieldRef, values: Iterable[str]) -> dict[str, str]:
    """``{text as given: str(pk)}`` of the values that are pks of rows of ``ref``'s model."""
    parsed: dict[str, Any] = {}
    pk_field = ref.model._meta.pk
    for value in set(values):
        try:
            parsed[value] = pk_field.to_python(value)
        except (ValidationError, ValueError, TypeError):
            continue
    found = {
        str(pk)
        for pk in ref.manager.filter(pk__in=list(parsed.values())).values_list("pk", flat=True)
    }
    return {value: str(pk) for value, pk in parsed.items() if str(pk) in found}


def _doc_map(ref: FieldRef, doc_ids: DocIds | None, wanted: set[str]) -> dict[str, str]:
    """``{doc_id: str(pk)}`` for the ``wanted`` document ids that ``doc_ids`` maps to rows."""
    if doc_ids is None:
        return {}
    if isinstance(doc_ids, str):
        try:
            column = ref.model._meta.get_field(doc_ids)
        except FieldDoesNotExist as exc:
            raise JudgmentsImportError(
                f"{ref.label} has no field {doc_ids!r} to find rows by document id: name the "
                "field that holds each row's document id."
            ) from exc
        given: dict[Any, str] = {}  # the value as the column holds it -> the id as given
        for doc in wanted:
            try:
                given.setdefault(column.to_python(doc), doc)
            except (ValidationError, ValueError, TypeError):
                continue
        found: dict[str, str] = {}
        rows = ref.manager.filter(**{f"{column.attname}__in": list(given)})
        for value, pk in rows.values_list(column.attname, "pk").order_by("pk"):
            if value in given:
                found.setdefault(given[value], str(pk))
        return found
    mapped = {}
    for doc in wanted:
        if doc in doc_ids:
            row = doc_ids[doc]
            mapped[doc] = str(row.pk if isinstance(row, models.Model) else row)
    real = _existing_pks(ref, mapped.values())
    return {doc: pk for doc, pk in mapped.items() if pk in real}


def _resolve(
    ref: FieldRef,
    rows: list[tuple[int, str, str, str, int]],
    doc_ids: DocIds | None,
    report: JudgmentsReport,
) -> list[_Graded]:
    """Each good row with its pk; a row that names no row of the model is an error."""
    pks = _existing_pks(ref, [value for _, _, kind, value, _ in rows if kind == "pk"])
    docs = _doc_map(ref, doc_ids, {value for _, _, kind, value, _ in rows if kind == "doc"})
    graded: list[_Graded] = []
    seen: dict[tuple[str, str], int] = {}
    for number, query, kind, value, grade in rows:
        if kind == "pk":
            pk = pks.get(value)
            if pk is None:
                report.errors.append((number, f"no {ref.label} has pk {_shown(value)}"))
                continue
        else:
            pk = docs.get(value)
            if pk is None:
                how = (
                    "give doc_ids (a mapping, or the field holding each row's document id)"
                    if doc_ids is None
                    else "no row is mapped to it"
                )
                report.errors.append((number, f"document {_shown(value)}: {how}"))
                continue
        earlier = seen.setdefault((query, pk), number)
        if earlier != number:
            report.errors.append(
                (number, f"row {pk} is graded for this query already, on line {earlier}")
            )
            continue
        graded.append(_Graded(number, query, pk, grade))
    return graded


def _save(judgment_list: JudgmentList, graded: list[_Graded], report: JudgmentsReport) -> None:
    """Save the queries and judgments (regrading a row the list has graded already)."""
    with transaction.atomic():
        texts = list(dict.fromkeys(g.query for g in graded))
        have = dict(
            JudgedQuery.objects.filter(judgment_list=judgment_list, text__in=texts).values_list(
                "text", "pk"
            )
        )
        new = [JudgedQuery(judgment_list=judgment_list, text=t) for t in texts if t not in have]
        JudgedQuery.objects.bulk_create(new, batch_size=1000)
        have.update({q.text: q.pk for q in new})
        Judgment.objects.bulk_create(
            [
                Judgment(query_id=have[g.query], object_pk=g.object_pk, grade=g.grade)
                for g in graded
            ],
            batch_size=1000,
            update_conflicts=True,
            unique_fields=["query", "object_pk"],
            update_fields=["grade"],
        )
        judgment_list.save(update_fields=["updated_at"])
    report.queries += len(new)
    report.judgments += len(graded)


def _finish(
    judgment_list: JudgmentList,
    rows: list[tuple[int, str, str, str, int]],
    doc_ids: DocIds | None,
    report: JudgmentsReport,
    skip_invalid: bool,
) -> JudgmentsReport:
    ref = _ref(judgment_list)
    graded = _resolve(ref, rows, doc_ids, report)
    report.errors.sort()
    if report.errors and not skip_invalid:
        return report
    if graded:
        _save(judgment_list, graded, report)
    return report


# --- the formats -------------------------------------------------------------------------------


def import_csv(
    file: Source,
    judgment_list: JudgmentList,
    *,
    doc_ids: DocIds | None = None,
    skip_invalid: bool = False,
) -> JudgmentsReport:
    """Grade rows from a CSV file with a header: ``query``, ``object_pk`` or ``doc_id``,
    ``grade``. Nothing is saved when a line is bad (unless ``skip_invalid``)."""
    report = JudgmentsReport()
    rows = _record_rows(_csv(_text(file)), report)
    return _finish(judgment_list, rows, doc_ids, report, skip_invalid)


def import_jsonl(
    file: Source,
    judgment_list: JudgmentList,
    *,
    doc_ids: DocIds | None = None,
    skip_invalid: bool = False,
) -> JudgmentsReport:
    """Grade rows from JSON Lines: ``{"query": ..., "object_pk"|"doc_id": ..., "grade": ...}``
    a line. Nothing is saved when a line is bad (unless ``skip_invalid``)."""
    report = JudgmentsReport()
    rows = _record_rows(_jsonl(_text(file)), report)
    return _finish(judgment_list, rows, doc_ids, report, skip_invalid)


def read_queries(queries: Source | Mapping[str, str]) -> dict[str, str]:
    """``{qid: text}`` from a mapping, a ``qid<TAB>text`` file or JSON Lines (BEIR's
    ``{"_id": ..., "text": ...}``); ``JudgmentsImportError`` names a line that is neither."""
    if isinstance(queries, Mapping):
        return {str(qid): str(text) for qid, text in queries.items()}
    found: dict[str, str] = {}
    for number, line in enumerate(_text(queries).splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError, ValueError):
                record = None
            qid = next(
                (record[k] for k in QUERY_ID_KEYS if isinstance(record, dict) and k in record), None
            )
            text = next(
                (record[k] for k in QUERY_TEXT_KEYS if isinstance(record, dict) and k in record),
                None,
            )
        else:
            qid, _, text = line.partition("\t")
            text = text if _ else None
        if qid is None or not isinstance(text, str):
            raise JudgmentsImportError(
                f"Queries file, line {number}: expected 'qid<TAB>text' or a JSON object with "
                '"_id" and "text"; nothing was imported.'
            )
        found[str(qid).strip()] = text
    return found


def _qrels(text: str, queries: Mapping[str, str]) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Records of a TREC qrels file (``qid iteration doc grade``) or BEIR's TSV (``qid doc
    score``, with a ``query-id`` header)."""
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if number == 1 and parts[0].lower() in ("query-id", "query_id", "qid"):
            continue  # BEIR's header
        if len(parts) == 4:
            qid, _, doc, grade = parts
        elif len(parts) == 3:
            qid, doc, grade = parts
        else:
            yield (
                number,
                (f"expected 'qid 0 doc_id grade' (or 'qid doc_id grade'), got {len(parts)} fields"),
            )
            continue
        if qid not in queries:
            yield number, f"query id {_shown(qid)} is not in the queries file"
            continue
        yield number, {"query": queries[qid], "doc_id": doc, "grade": grade}


def import_trec_qrels(
    file: Source,
    judgment_list: JudgmentList,
    *,
    queries: Source | Mapping[str, str],
    doc_ids: DocIds,
    skip_invalid: bool = False,
) -> JudgmentsReport:
    """Grade rows from TREC qrels (``qid 0 doc_id grade`` a line), each query's text from
    ``queries``, each document's row from ``doc_ids`` (a dict, or the name of the field that
    holds each row's document id). Nothing is saved when a line is bad (unless
    ``skip_invalid``)."""
    report = JudgmentsReport()
    texts = read_queries(queries)
    rows = _record_rows(_qrels(_text(file), texts), report)
    return _finish(judgment_list, rows, doc_ids, report, skip_invalid)


# --- from the eval pairs -------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def from_eval_pairs(
    judgment_list: JudgmentList,
    pairs: Iterable[TrainingPair] | None = None,
    *,
    grade: int = PAIR_GRADE,
) -> JudgmentsReport:
    """Grade rows from the eval pairs (default: every pair of split ``eval``).

    Each positive pair's ``text_a`` is a query; the row it is graded on (``grade``, 3: the
    answer) is the row whose source text is its ``text_b``, or holds it at the start of a line,
    as the gate matches a positive (``finetuning.gate.PositiveIndex``); a hard negative
    (``text_negative``) matched the same way is graded 0. A pair whose ``text_b`` no row holds
    is left out and listed in ``report.unmatched``; ``JudgmentsImportError`` when no pair
    matches a row.
    """
    _grade(grade)
    if pairs is None:
        pairs = TrainingPair.objects.filter(split="eval").order_by("pk")
    chosen = [p for p in positive_pairs(pairs) if p.split == "eval"]
    if not chosen:
        raise JudgmentsImportError(
            "No eval pairs to judge from: import pairs with split 'eval' (sbert_import_pairs "
            "--split eval) or make them (sbert_make_pairs --eval-share)."
        )
    ref = _ref(judgment_list)
    wanted = {p.text_b.strip() for p in chosen} | {
        p.text_negative.strip() for p in chosen if p.text_negative.strip()
    }
    index = PositiveIndex(wanted)
    short = {t for t in wanted if len(t) < HEAD_CHARS}
    heads: dict[str, list[str]] = {}
    for text in wanted:
        if len(text) >= HEAD_CHARS:
            heads.setdefault(text[:HEAD_CHARS], []).append(text)
    holders: dict[str, list[str]] = {}  # positive or negative text -> pks of the rows holding it
    for row in light_rows(ref, ref.manager.order_by("pk")).iterator(chunk_size=2000):
        source = ref.field.get_source_text(row).strip()
        if not source or not index(source) and source not in wanted:
            continue
        found = {source} & wanted
        for line in _lines(source):
            found |= {line} & short
            found |= {
                text for text in heads.get(line[:HEAD_CHARS], ()) if PositiveIndex([text])(line)
            }
        for text in found:
            holders.setdefault(text, []).append(str(row.pk))
    report = JudgmentsReport(rows=len(chosen))
    graded: dict[tuple[str, str], int] = {}
    for pair in chosen:
        pks = holders.get(pair.text_b.strip(), [])
        if not pks:
            report.unmatched.append(pair.pk)
            continue
        query = pair.text_a.strip()
        for pk in pks:
            graded[(query, pk)] = grade
        for pk in holders.get(pair.text_negative.strip(), []) if pair.text_negative.strip() else []:
            graded.setdefault((query, pk), NEGATIVE_GRADE)
    if not graded:
        raise JudgmentsImportError(
            f"None of the {len(chosen)} eval pairs' text_b is the text of a row of "
            f"{ref.label}.{ref.name}: judge the field the pairs were made from."
        )
    _save(
        judgment_list,
        [_Graded(0, query, pk, g) for (query, pk), g in graded.items()],
        report,
    )
    return report


def relevance(judgment_list: JudgmentList) -> dict[str, dict[str, int]]:
    """``{query text: {object_pk: grade}}`` of a list: what ``ranking_metrics`` scores
    rankings of row pks (as text) against."""
    graded: dict[str, dict[str, int]] = {}
    rows = Judgment.objects.filter(query__judgment_list=judgment_list).order_by("query", "pk")
    for text, pk, grade in rows.values_list("query__text", "object_pk", "grade"):
        graded.setdefault(text, {})[pk] = grade
    return graded


def import_file(
    file: Source,
    judgment_list: JudgmentList,
    fmt: str,
    *,
    queries: Source | Mapping[str, str] | None = None,
    doc_ids: DocIds | None = None,
    skip_invalid: bool = False,
) -> JudgmentsReport:
    """``import_csv``, ``import_jsonl`` or ``import_trec_qrels`` by ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"Unknown format {fmt!r}; use one of {', '.join(FORMATS)}.")
    if fmt == "trec":
        if queries is None or doc_ids is None:
            raise JudgmentsImportError(
                "TREC qrels need the queries (a 'qid<TAB>text' or JSON Lines file) and the "
                "mapping of document ids to rows (the field holding each row's document id)."
            )
        return import_trec_qrels(
            file, judgment_list, queries=queries, doc_ids=doc_ids, skip_invalid=skip_invalid
        )
    reader = import_csv if fmt == "csv" else import_jsonl
    return reader(file, judgment_list, doc_ids=doc_ids, skip_invalid=skip_invalid)


def detect_format(name: str) -> str:
    """``"jsonl"`` for .jsonl / .json / .ndjson names, ``"trec"`` for .qrels / .trec /
    .tsv / .txt, else ``"csv"``."""
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith((".qrels", ".trec", ".tsv", ".txt")):
        return "trec"
    return "csv"
