"""What the search log says about clicks, read by PostgreSQL for ``pairs``: the days they fall
on, each clicked (query, row) with its visits (one per visitor and split: best position, latest
click), every result the searches showed and whether it was clicked (for the click model), and
the rows shown around each click (the negatives from behaviour).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Case, CharField, Max, Min, Q, Value, When
from django.utils import timezone

from ..models import SearchEvent, SearchLog
from .clickmodel import Shown

CLICK = "click"


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


def between(since: datetime | None, until: datetime | None, model_label: str | None) -> Any:
    """The clicks logged in [since, until), on searches of ``model_label`` if given."""
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


@dataclass(frozen=True)
class Visit:
    """One visitor's clicks on one row for one query (in one split)."""

    client: str
    network: str  # "" for searches logged before networks were
    position: int  # the best position it was clicked at
    last: datetime  # the latest click

    @property
    def network_or_client(self) -> str:
        """What counts as the visitor's network (a search without one: its own client)."""
        return self.network or f"client:{self.client}"


# (split, query, model, field, row): a clicked pair of a build
PairKey = tuple[str, str, str, str, str]
_KEY = ("split", "search__normalized", "search__model_label", "search__field", "object_pk")


def visits(events: Any, eval_from: date | None) -> dict[PairKey, list[Visit]]:
    """Each clicked (split, query, model, field, row) with its visitors, grouped by
    PostgreSQL and read in chunks."""
    split: Any = Value("train", output_field=CharField())
    if eval_from is not None:  # created_at__date: the day in the current time zone
        split = Case(
            When(created_at__date__gte=eval_from, then=Value("eval")),
            default=Value("train"),
            output_field=CharField(),
        )
    rows = (
        events.annotate(split=split)
        .values(*_KEY, "client", "search__network")
        .annotate(best=Min("position"), last=Max("created_at"))
        .order_by()
    )
    found: dict[PairKey, list[Visit]] = defaultdict(list)
    for row in rows.iterator(chunk_size=5000):
        visit = Visit(row["client"], row["search__network"] or "", row["best"], row["last"])
        found[tuple(row[name] for name in _KEY)].append(visit)
    return found


def _searches(
    events: Any, since: datetime | None, until: datetime | None, label: str | None
) -> Any:
    """The searches logged in [since, until) (of ``label`` if given), and those of ``events``
    (a click just inside the window on a search just before it)."""
    window = _within(SearchLog.objects.all(), since, until, label, "model_label")
    return SearchLog.objects.filter(
        Q(pk__in=window.values("pk")) | Q(pk__in=events.values("search_id"))
    )


def shown(
    since: datetime | None,
    until: datetime | None,
    model_label: str | None,
    events: Any = None,
    set_aside: Iterable[str] = (),
) -> list[tuple[str, tuple[str, str, str] | None, Shown, int]]:
    """Every (query, row) pair the searches logged in [since, until) showed, as (model,
    (query, field, row) or None, where it was shown and clicked, how many such pairs). Pairs
    never clicked come grouped by their shape, with no identity: the click model needs how
    many there are, not which. A place counts visitors, not searches: one visitor who
    searched the same query twenty times and clicked the row each time (or never) is one
    showing and one click (or none), as ``MIN_CLIENTS`` counts them; a visitor is a network
    (a search logged without one: its client), and the ``set_aside`` networks' searches are
    left out. One SQL statement over the jsonb results."""
    if events is None:
        events = between(since, until, model_label)
    searches = _searches(events, since, until, model_label)
    sql, params = searches.values("id").query.sql_with_params()
    log = connection.ops.quote_name(SearchLog._meta.db_table)
    event = connection.ops.quote_name(SearchEvent._meta.db_table)
    query = f"""
        WITH shown AS (
            SELECT s.id AS search_id, s.normalized, s.model_label, s.field,
                   COALESCE(NULLIF(s.network, ''), 'client:' || s.client) AS client,
                   r.value->>0 AS object_pk, (r.value->>1)::int AS position
            FROM {log} s CROSS JOIN LATERAL jsonb_array_elements(s.results) r
            WHERE s.id IN ({sql})
              AND NOT COALESCE(NULLIF(s.network, ''), 'client:' || s.client) = ANY(%s)
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
        cursor.execute(query, [*params, list(set_aside), CLICK, *params])
        return [
            (
                label,
                None if normalized is None else (normalized, field_name, pk),
                Shown(tuple(positions), tuple(shown), tuple(clicked)),
                int(count),
            )
            for label, normalized, field_name, pk, positions, shown, clicked, count in cursor
        ]


def negatives(events: Any, eval_from: date | None) -> dict[tuple, dict[str, str]]:
    """For each (split, query, model, field, clicked row): the pk of its "skipped" and of its
    "unexamined" negative (feedback.pairs), ties to the better position. One SQL statement."""
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
