"""Training pairs from what visitors did: (query, text of the row they clicked).

::

    report = behaviour_pairs(since, until)     # PairsReport(created=..., train=..., eval=...)

A click is evidence, not proof: a (query, row) pair is made only when at least
``FEEDBACK["MIN_CLIENTS"]`` distinct visitors clicked that row for that query (queries are
compared normalised: lower-cased, whitespace collapsed; their clicks are merged), and when a
click model fitted to the searches read finds it at least ``FEEDBACK["MIN_RELEVANCE"]`` likely
that visitors wanted the row (``feedback.clickmodel``). Visitors click what they see first
whether it is right or not, and a wrong row shown deep down gathers a few chance clicks once a
query is searched often; the model learns from the log how often each position is looked at
and how often wanted and unwanted rows are clicked when they are, and weighs each pair's
clicks against every time it was shown (each visitor counted once, so no visitor's repeated
searches outweigh the others'). The text of the row is what its EmbeddingField encodes
(``EmbeddingField.get_source_text``), so the pair teaches exactly what search compares.

Split by time: the clicks of the most recent ``FEEDBACK["EVAL_SHARE"]`` of the days make the
``eval`` pairs, the earlier ones the ``train`` pairs, so the gate measures a run on behaviour
later than it trained on. A pair clicked often enough in both windows is one of each.

Hard negatives (``FEEDBACK["NEGATIVES"]``): ``"mined"`` stores none (the default recipe mines
one per pair with the serving model when the run starts, ``finetuning.negatives``);
``"unexamined"`` takes the result most often shown below the searches' last click (seen as not
examined by the visitor: arXiv 2408.04197 found such negatives better for embedding training
than skipped ones); ``"skipped"`` the result most often shown above the click and not clicked.
Either falls back on the other kind, and a train pair with neither is left out (a run trains on
triples only when every pair has a negative). A row clicked for the query by anyone is never
its negative.

Every pair records where it came from in ``source``: ``"events:app.Model.field:FIRST..LAST"``
(the days of the clicks read). Running again over the same or a longer range makes only the
pairs not made before (same query, row text and split), so nothing is duplicated.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, CharField, Count, Value, When
from django.utils import timezone

from ..conf import sbert_settings
from ..indexing import field_refs, get_ref, light_rows
from ..models import SearchEvent, SearchLog, TrainingPair
from .clickmodel import PositionModel, Shown, fit, relevances

SOURCE_PREFIX = "events:"
NEGATIVE_CHOICES = ("mined", "unexamined", "skipped")
CLICK = "click"


@dataclass
class PairsReport:
    """What one build of pairs from behaviour did."""

    created: int = 0
    existing: int = 0  # made by an earlier build: not made again
    train: int = 0  # created, by split
    eval: int = 0
    too_few_clients: int = 0  # (query, row) pairs below MIN_CLIENTS
    unlikely: int = 0  # (query, row) pairs the click model finds below MIN_RELEVANCE
    without_negative: int = 0  # train pairs left out: no negative from behaviour
    missing_rows: int = 0  # clicked rows deleted (or unreadable) since
    days: list[date] = field(default_factory=list)
    eval_from: date | None = None  # first day of the eval window (None: no eval pairs)
    sources: list[str] = field(default_factory=list)
    click_models: dict[str, PositionModel] = field(default_factory=dict)  # fitted, by model

    def describe(self) -> str:
        span = f"{self.days[0]}..{self.days[-1]}" if self.days else "no clicks"
        return (
            f"{self.created} pairs created ({self.train} train, {self.eval} eval) from clicks "
            f"of {len(self.days)} days ({span}); {self.existing} already made, "
            f"{self.too_few_clients} clicked by too few visitors, {self.unlikely} more likely "
            f"chance clicks than wanted rows, {self.without_negative} without a negative, "
            f"{self.missing_rows} rows gone"
        )


def _tz_name() -> str:
    return timezone.get_current_timezone_name() if settings.USE_TZ else "UTC"


def _within(
    rows: Any, since: datetime | None, until: datetime | None, label: str | None, label_path: str
) -> Any:
    """``rows`` created in [since, until), of the model ``label`` (at ``label_path``) if given."""
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    return rows.filter(**{label_path: label}) if label else rows


def _clicks(since: datetime | None, until: datetime | None, model_label: str | None) -> Any:
    events = SearchEvent.objects.filter(kind=CLICK)
    return _within(events, since, until, model_label, "search__model_label")


def click_days(events: Any) -> list[date]:
    """The distinct days (in the current time zone) ``events`` fall on, oldest first."""
    sql, params = events.values("created_at").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT (t.created_at AT TIME ZONE %s)::date AS day FROM ({sql}) t "
            "ORDER BY day",
            [_tz_name(), *params],
        )
        return [row[0] for row in cursor.fetchall()]


def eval_window(days: list[date], share: float) -> date | None:
    """The first day of the eval window: the most recent ``share`` of ``days`` (at least one
    day, when there are two days or more; None with fewer: no eval pairs)."""
    if len(days) < 2:
        return None
    count = min(len(days) - 1, max(1, round(len(days) * share)))
    return days[-count]


def _evidence(events: Any, eval_from: date | None) -> list[dict[str, Any]]:
    """(split, query, model, field, row) with the number of distinct visitors who clicked,
    counted by PostgreSQL."""
    split: Any = Value("train", output_field=CharField())
    if eval_from is not None:  # created_at__date: the day in the current time zone
        split = Case(
            When(created_at__date__gte=eval_from, then=Value("eval")),
            default=Value("train"),
            output_field=CharField(),
        )
    return list(
        events.annotate(split=split)
        .values(
            "split",
            "search__normalized",
            "search__model_label",
            "search__field",
            "object_pk",
        )
        .annotate(clients=Count("client", distinct=True))
        .order_by()
    )


def _shown_pairs(
    since: datetime | None, until: datetime | None, model_label: str | None
) -> list[tuple[str, tuple[str, str, str] | None, Shown, int]]:
    """Every (query, row) pair the searches logged in [since, until) showed, as (model,
    (query, field, row) or None, where it was shown and clicked, how many such pairs). Pairs
    never clicked come grouped by their shape, with no identity: the click model needs how
    many there are, not which. A place counts visitors, not searches: one visitor who
    searched the same query twenty times and clicked the row each time (or never) is one
    showing and one click (or none), as ``MIN_CLIENTS`` counts them. One SQL statement over
    the jsonb results."""
    searches = _within(SearchLog.objects.all(), since, until, model_label, "model_label")
    sql, params = searches.values("id").query.sql_with_params()
    log = connection.ops.quote_name(SearchLog._meta.db_table)
    event = connection.ops.quote_name(SearchEvent._meta.db_table)
    query = f"""
        WITH shown AS (
            SELECT s.id AS search_id, s.client, s.normalized, s.model_label, s.field,
                   r.value->>0 AS object_pk, (r.value->>1)::int AS position
            FROM {log} s CROSS JOIN LATERAL jsonb_array_elements(s.results) r
            WHERE s.id IN ({sql})
        ),
        clicked AS (
            SELECT DISTINCT search_id, object_pk FROM {event}
            WHERE kind = %s AND search_id IN ({sql})
        ),
        places AS (
            SELECT shown.normalized, shown.model_label, shown.field, shown.object_pk,
                   shown.position, count(DISTINCT shown.client) AS shown,
                   count(DISTINCT shown.client) FILTER (WHERE c.search_id IS NOT NULL)
                       AS clicked
            FROM shown LEFT JOIN clicked c
              ON c.search_id = shown.search_id AND c.object_pk = shown.object_pk
            WHERE shown.position >= 1
            GROUP BY 1, 2, 3, 4, 5
        ),
        pairs AS (
            SELECT normalized, model_label, field, object_pk,
                   array_agg(position ORDER BY position) AS positions,
                   array_agg(shown ORDER BY position) AS shown,
                   array_agg(clicked ORDER BY position) AS clicked,
                   sum(clicked) > 0 AS any_click
            FROM places GROUP BY 1, 2, 3, 4
        )
        SELECT model_label, normalized, field, object_pk, positions, shown, clicked, 1
        FROM pairs WHERE any_click
        UNION ALL
        SELECT model_label, NULL, NULL, NULL, positions, shown, clicked, count(*)
        FROM pairs WHERE NOT any_click GROUP BY model_label, positions, shown, clicked
    """
    with connection.cursor() as cursor:
        cursor.execute(query, [*params, CLICK, *params])
        return [
            (
                label,
                None if normalized is None else (normalized, field_name, pk),
                Shown(tuple(positions), tuple(shown), tuple(clicked)),
                int(count),
            )
            for label, normalized, field_name, pk, positions, shown, clicked, count in cursor
        ]


def _relevance(
    since: datetime | None, until: datetime | None, model_label: str | None
) -> tuple[dict[tuple[str, str, str, str], float], dict[str, PositionModel]]:
    """The probability that visitors wanted each clicked (query, model, field, row) pair, by a
    position-based click model (``feedback.clickmodel``) fitted, for each model, to every
    result the window's searches showed; and the fitted models."""
    by_label: dict[str, list[tuple[tuple[str, str, str] | None, Shown, int]]] = defaultdict(list)
    for label, identity, shown, count in _shown_pairs(since, until, model_label):
        by_label[label].append((identity, shown, count))
    wanted: dict[tuple[str, str, str, str], float] = {}
    models: dict[str, PositionModel] = {}
    for label, rows in by_label.items():
        model = models[label] = fit([s for _, s, _ in rows], [c for _, _, c in rows])
        clicked = [(identity, shown) for identity, shown, _ in rows if identity is not None]
        for (identity, _), chance in zip(
            clicked, relevances(model, [s for _, s in clicked]), strict=True
        ):
            normalized, field_name, pk = identity
            wanted[(normalized, label, field_name, pk)] = chance
    return wanted, models


def _negatives(events: Any, eval_from: date | None) -> dict[tuple, dict[str, str]]:
    """For each (split, query, model, field, clicked row): the pk of the result most often
    shown above the click and not clicked ("skipped"), and the one most often shown below the
    search's last click ("unexamined"), ties to the better position. A row anyone clicked for
    the query is never a candidate. One SQL statement over the results' jsonb positions."""
    sql, params = events.values("id").query.sql_with_params()
    log = connection.ops.quote_name(SearchLog._meta.db_table)
    event = connection.ops.quote_name(SearchEvent._meta.db_table)
    cutoff = eval_from or date.max
    query = f"""
        WITH clicks AS (
            SELECT e.search_id, e.object_pk, e.position, s.normalized, s.model_label, s.field,
                   CASE WHEN (e.created_at AT TIME ZONE %s)::date >= %s THEN 'eval'
                        ELSE 'train' END AS split
            FROM {event} e JOIN {log} s ON s.id = e.search_id
            WHERE e.id IN ({sql})
        ),
        positives AS (SELECT DISTINCT normalized, model_label, field, object_pk FROM clicks),
        last_click AS (SELECT search_id, max(position) AS last FROM clicks GROUP BY search_id),
        shown AS (
            SELECT c.split, c.normalized, c.model_label, c.field, c.object_pk AS clicked,
                   r.value->>0 AS candidate, (r.value->>1)::int AS position,
                   CASE WHEN (r.value->>1)::int < c.position THEN 'skipped'
                        WHEN (r.value->>1)::int > l.last THEN 'unexamined' END AS kind
            FROM clicks c
            JOIN {log} s ON s.id = c.search_id
            JOIN last_click l ON l.search_id = c.search_id
            CROSS JOIN LATERAL jsonb_array_elements(s.results) r
        ),
        counted AS (
            SELECT split, normalized, model_label, field, clicked, kind, candidate,
                   count(*) AS votes, avg(position) AS mean_position
            FROM shown
            WHERE kind IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM positives p WHERE p.normalized = shown.normalized
                AND p.model_label = shown.model_label AND p.field = shown.field
                AND p.object_pk = shown.candidate)
            GROUP BY split, normalized, model_label, field, clicked, kind, candidate
        )
        SELECT DISTINCT ON (split, normalized, model_label, field, clicked, kind)
               split, normalized, model_label, field, clicked, kind, candidate
        FROM counted
        ORDER BY split, normalized, model_label, field, clicked, kind, votes DESC,
                 mean_position, candidate
    """
    chosen: dict[tuple, dict[str, str]] = defaultdict(dict)
    with connection.cursor() as cursor:
        cursor.execute(query, [_tz_name(), cutoff, *params])
        for split, normalized, label, field_name, clicked, kind, candidate in cursor.fetchall():
            chosen[(split, normalized, label, field_name, clicked)][kind] = candidate
    return chosen


def _evidence_key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (
        row["search__normalized"],
        row["search__model_label"],
        row["search__field"],
        row["object_pk"],
    )


def _field_name(model_label: str, field_name: str) -> str:
    """The EmbeddingField a search ranked by: the logged one, else the model's only one."""
    if field_name:
        return field_name
    refs = field_refs(apps.get_model(model_label))
    if not refs:
        raise LookupError(f"{model_label} has no EmbeddingField.")
    return refs[0].name


def row_texts(model_label: str, field_name: str, pks: Iterable[str]) -> dict[str, str]:
    """The source text of each row (by pk as text) of ``model_label`` that still exists: what
    its EmbeddingField encodes. Deleted rows and pks of the wrong type are left out."""
    ref = get_ref(model_label, _field_name(model_label, field_name))
    pk_field = ref.model._meta.pk
    values = {}
    for pk in set(pks):
        try:
            values[pk_field.to_python(pk)] = pk
        except Exception:  # a pk that is not one of this table's: the row cannot exist
            continue
    texts: dict[str, str] = {}
    keys = list(values)
    for start in range(0, len(keys), 500):
        rows = light_rows(ref, ref.manager.filter(pk__in=keys[start : start + 500]))
        for instance in rows:
            text = ref.field.get_source_text(instance).strip()
            if text:
                texts[str(instance.pk)] = text
    return texts


def source_name(model_label: str, field_name: str, days: list[date]) -> str:
    """``events:app.Model.field:FIRST..LAST``: where a pair from behaviour came from."""
    span = f"{days[0]}..{days[-1]}" if days else ""
    return f"{SOURCE_PREFIX}{model_label}.{field_name}:{span}"[:200]


def behaviour_pairs(
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    model_label: str | None = None,
    min_clients: int | None = None,
    min_relevance: float | None = None,
    negatives: str | None = None,
    eval_share: float | None = None,
) -> PairsReport:
    """Make training pairs from the clicks logged in [``since``, ``until``) and save the new
    ones; see the module's docstring. Options left None take ``SBERT["FEEDBACK"]``'s."""
    feedback = sbert_settings.FEEDBACK
    min_clients = int(feedback["MIN_CLIENTS"] if min_clients is None else min_clients)
    min_relevance = float(feedback["MIN_RELEVANCE"] if min_relevance is None else min_relevance)
    negatives = negatives or feedback["NEGATIVES"]
    share = float(feedback["EVAL_SHARE"] if eval_share is None else eval_share)
    if negatives not in NEGATIVE_CHOICES:
        raise ValueError(f"negatives must be one of {', '.join(NEGATIVE_CHOICES)}: {negatives!r}")
    if min_clients < 1:
        raise ValueError(f"min_clients must be at least 1, got {min_clients}.")
    if not 0 <= min_relevance <= 1:
        raise ValueError(f"min_relevance must be between 0 and 1, got {min_relevance}.")
    report = PairsReport()
    events = _clicks(since, until, model_label)
    report.days = click_days(events)
    if not report.days:
        return report
    report.eval_from = eval_window(report.days, share)
    evidence = _evidence(events, report.eval_from)
    kept = [row for row in evidence if row["clients"] >= min_clients]
    report.too_few_clients = len(evidence) - len(kept)
    if min_relevance > 0 and kept:
        wanted, report.click_models = _relevance(since, until, model_label)
        likely = [
            row
            for row in kept
            # a row clicked outside the logged results (a later page) has no places: kept
            if wanted.get(_evidence_key(row), 1.0) >= min_relevance
        ]
        report.unlikely = len(kept) - len(likely)
        kept = likely
    chosen = _negatives(events, report.eval_from) if negatives != "mined" else {}
    fallback = {"unexamined": "skipped", "skipped": "unexamined"}.get(negatives, "")

    by_target: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in kept:
        by_target[(row["search__model_label"], row["search__field"])].append(row)
    pairs: list[TrainingPair] = []
    for (label, field_name), rows in by_target.items():
        picks = {}
        for row in rows:
            key = (
                row["split"],
                row["search__normalized"],
                label,
                field_name,
                row["object_pk"],
            )
            options = chosen.get(key, {})
            picks[key] = options.get(negatives) or options.get(fallback) or ""
        try:
            texts = row_texts(
                label, field_name, [r["object_pk"] for r in rows] + [p for p in picks.values() if p]
            )
        except LookupError:  # the model or field is gone: its clicks teach nothing now
            report.missing_rows += len(rows)
            continue
        source = source_name(label, _field_name(label, field_name), report.days)
        for key, negative_pk in picks.items():
            split, query, _, _, clicked = key
            positive = texts.get(clicked)
            if positive is None:
                report.missing_rows += 1
                continue
            negative = texts.get(negative_pk, "") if negative_pk else ""
            if negatives != "mined" and split == "train" and not negative:
                report.without_negative += 1
                continue
            pairs.append(
                TrainingPair(
                    text_a=query,
                    text_b=positive,
                    text_negative=negative if split == "train" else "",
                    split=split,
                    source=source,
                )
            )
        if source not in report.sources:
            report.sources.append(source)
    _save_new(pairs, report)
    return report


def _save_new(pairs: list[TrainingPair], report: PairsReport) -> None:
    """Save the pairs no earlier build made (same query, row text and split)."""
    made = set(
        TrainingPair.objects.filter(source__startswith=SOURCE_PREFIX).values_list(
            "text_a", "text_b", "split"
        )
    )
    new = []
    for pair in pairs:
        key = (pair.text_a, pair.text_b, pair.split)
        if key in made:
            report.existing += 1
            continue
        made.add(key)
        new.append(pair)
    with transaction.atomic():
        TrainingPair.objects.bulk_create(new, batch_size=1000)
    report.created = len(new)
    report.train = sum(p.split == "train" for p in new)
    report.eval = report.created - report.train


__all__ = [
    "NEGATIVE_CHOICES",
    "SOURCE_PREFIX",
    "PairsReport",
    "behaviour_pairs",
    "click_days",
    "eval_window",
    "row_texts",
    "source_name",
]
