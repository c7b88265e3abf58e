"""What people look for: figures of the search log, counted by PostgreSQL.

::

    window = Window.days(30)                 # or Window(since, until), half-open datetimes
    summary(window)                          # searches, visitors, click-through, MRR ...
    top_queries(window)                      # most searched normalised queries
    zero_results(window)                     # queries that found nothing
    abandoned(window)                        # queries with results and no click
    ctr_by_position(window)                  # click-through rate of positions 1..10
    mrr_by_day(window); mrr_by_version(window)

A search counts once however many rows it showed; its clicks are the ``SearchEvent`` rows of
kind ``"click"`` (docs/learning.md defines each figure). Every figure is one SQL statement
over the window (no row is read into Python); days are those of the current time zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from ..models import SearchEvent, SearchLog

CLICK = "click"
POSITIONS = 10  # click-through is shown for the first page


@dataclass(frozen=True)
class Window:
    """Searches logged in [``since``, ``until``), optionally of one model only."""

    since: datetime
    until: datetime
    model_label: str = ""

    @classmethod
    def between(cls, first: date, last: date, model_label: str = "") -> Window:
        """The days ``first`` to ``last``, both included, in the current time zone."""
        return cls(_day_start(first), _day_start(last + timedelta(days=1)), model_label)

    @classmethod
    def days(cls, count: int, model_label: str = "", today: date | None = None) -> Window:
        """The last ``count`` days, today included."""
        today = today or timezone.localdate()
        return cls.between(today - timedelta(days=count - 1), today, model_label)

    @property
    def first_day(self) -> date:
        return timezone.localtime(self.since).date() if settings.USE_TZ else self.since.date()

    @property
    def last_day(self) -> date:
        end = self.until - timedelta(microseconds=1)
        return timezone.localtime(end).date() if settings.USE_TZ else end.date()


def _day_start(day: date) -> datetime:
    start = datetime.combine(day, time.min)
    return timezone.make_aware(start) if settings.USE_TZ else start


def _tables() -> tuple[str, str]:
    quote = connection.ops.quote_name
    return quote(SearchLog._meta.db_table), quote(SearchEvent._meta.db_table)


def _where(window: Window, alias: str = "s") -> tuple[str, list[Any]]:
    sql = f"{alias}.created_at >= %s AND {alias}.created_at < %s"
    params: list[Any] = [window.since, window.until]
    if window.model_label:
        sql += f" AND {alias}.model_label = %s"
        params.append(window.model_label)
    return sql, params


def _rows(sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _first_clicks(window: Window) -> tuple[str, list[Any]]:
    """A CTE ``searches``: each search of the window with its first click's position (NULL:
    no click)."""
    log, event = _tables()
    where, params = _where(window)
    sql = f"""
        WITH searches AS (
            SELECT s.id, s.normalized, s.result_count, s.encoder_name, s.version, s.client,
                   COALESCE(NULLIF(s.network, ''), 'client:' || s.client) AS network,
                   s.created_at,
                   (SELECT min(e.position) FROM {event} e
                    WHERE e.search_id = s.id AND e.kind = %s) AS first_click
            FROM {log} s WHERE {where}
        )
    """
    return sql, [CLICK, *params]


def summary(window: Window) -> dict[str, Any]:
    """Searches, distinct visitors (client keys) and their networks, searches with no result,
    with results but no click, the share clicked, and the mean reciprocal rank of the first
    click."""
    cte, params = _first_clicks(window)
    (row,) = _rows(
        cte
        + """
        SELECT count(*) AS searches,
               count(DISTINCT client) AS visitors,
               count(DISTINCT network) AS networks,
               count(DISTINCT normalized) AS queries,
               count(*) FILTER (WHERE result_count = 0) AS zero_results,
               count(*) FILTER (WHERE result_count > 0 AND first_click IS NULL) AS abandoned,
               count(*) FILTER (WHERE first_click IS NOT NULL) AS clicked,
               avg(COALESCE(1.0 / first_click, 0)) FILTER (WHERE result_count > 0) AS mrr
        FROM searches
        """,
        params,
    )
    shown = row["searches"] - row["zero_results"]
    row["click_rate"] = row["clicked"] / shown if shown else None
    row["mrr"] = float(row["mrr"]) if row["mrr"] is not None else None
    return row


def top_queries(window: Window, limit: int = 20) -> list[dict[str, Any]]:
    """The most searched normalised queries: searches, visitors, networks, share with a click,
    and the mean reciprocal rank of the first click."""
    cte, params = _first_clicks(window)
    return _floats(
        _rows(
            cte
            + """
            SELECT normalized AS query, count(*) AS searches,
                   count(DISTINCT client) AS visitors,
                   count(DISTINCT network) AS networks,
                   avg(result_count) AS mean_results,
                   count(*) FILTER (WHERE first_click IS NOT NULL)::float
                       / NULLIF(count(*) FILTER (WHERE result_count > 0), 0) AS click_rate,
                   avg(COALESCE(1.0 / first_click, 0)) FILTER (WHERE result_count > 0) AS mrr
            FROM searches GROUP BY normalized
            ORDER BY searches DESC, normalized LIMIT %s
            """,
            [*params, limit],
        )
    )


def zero_results(window: Window, limit: int = 20) -> list[dict[str, Any]]:
    """Queries that found nothing, most frequent first: content to write, synonyms to add."""
    log, _ = _tables()
    where, params = _where(window)
    return _rows(
        f"""
        SELECT s.normalized AS query, count(*) AS searches, count(DISTINCT s.client) AS visitors,
               max(s.created_at) AS last_seen
        FROM {log} s WHERE {where} AND s.result_count = 0
        GROUP BY s.normalized ORDER BY searches DESC, query LIMIT %s
        """,
        [*params, limit],
    )


def abandoned(window: Window, limit: int = 20) -> list[dict[str, Any]]:
    """Queries whose results were shown and not clicked, most frequent first, with the share of
    their searches that ended so: results that look wrong to the visitor."""
    cte, params = _first_clicks(window)
    return _floats(
        _rows(
            cte
            + """
            SELECT normalized AS query,
                   count(*) FILTER (WHERE first_click IS NULL) AS abandoned,
                   count(*) AS searches,
                   count(*) FILTER (WHERE first_click IS NULL)::float / count(*) AS share
            FROM searches WHERE result_count > 0
            GROUP BY normalized HAVING count(*) FILTER (WHERE first_click IS NULL) > 0
            ORDER BY abandoned DESC, share DESC, query LIMIT %s
            """,
            [*params, limit],
        )
    )


def ctr_by_position(window: Window, positions: int = POSITIONS) -> list[dict[str, Any]]:
    """For positions 1..``positions``: searches that showed a row there (from the jsonb of
    results), clicks on it, and their ratio."""
    log, event = _tables()
    where, params = _where(window)
    rows = _rows(
        f"""
        WITH shown AS (
            SELECT (r.value->>1)::int AS position, count(*) AS impressions
            FROM {log} s CROSS JOIN LATERAL jsonb_array_elements(s.results) r
            WHERE {where} AND (r.value->>1)::int <= %s
            GROUP BY 1
        ), clicked AS (
            SELECT e.position, count(*) AS clicks
            FROM {event} e JOIN {log} s ON s.id = e.search_id
            WHERE {where} AND e.kind = %s AND e.position <= %s
            GROUP BY 1
        )
        SELECT shown.position, shown.impressions, COALESCE(clicked.clicks, 0) AS clicks
        FROM shown LEFT JOIN clicked ON clicked.position = shown.position
        ORDER BY shown.position
        """,
        [*params, positions, *params, CLICK, positions],
    )
    for row in rows:
        row["ctr"] = row["clicks"] / row["impressions"] if row["impressions"] else 0.0
    return rows


def mrr_by_day(window: Window) -> list[dict[str, Any]]:
    """Per day and encoder version: searches with results, and the mean reciprocal rank of
    their first click (0 for no click)."""
    cte, params = _first_clicks(window)
    tz = timezone.get_current_timezone_name() if settings.USE_TZ else "UTC"
    return _floats(
        _rows(
            cte
            + """
            SELECT (created_at AT TIME ZONE %s)::date AS day, encoder_name, version,
                   count(*) AS searches, avg(COALESCE(1.0 / first_click, 0)) AS mrr
            FROM searches WHERE result_count > 0
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            """,
            [*params, tz],
        )
    )


def mrr_by_version(window: Window) -> list[dict[str, Any]]:
    """Per encoder version: searches with results, the share clicked, the mean reciprocal
    rank of the first click, and when the version was first and last logged."""
    cte, params = _first_clicks(window)
    return _floats(
        _rows(
            cte
            + """
            SELECT encoder_name, version, count(*) AS searches,
                   count(*) FILTER (WHERE first_click IS NOT NULL)::float / count(*)
                       AS click_rate,
                   avg(COALESCE(1.0 / first_click, 0)) AS mrr,
                   min(created_at) AS first_seen, max(created_at) AS last_seen
            FROM searches WHERE result_count > 0
            GROUP BY 1, 2 ORDER BY first_seen, 1, 2
            """,
            params,
        )
    )


def models_logged() -> list[str]:
    """The model labels the log holds searches of (the page's filter)."""
    return list(
        SearchLog.objects.order_by("model_label").values_list("model_label", flat=True).distinct()
    )


def _floats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PostgreSQL's numeric averages as floats (JSON and templates want numbers)."""
    for row in rows:
        for key, value in row.items():
            if value is not None and type(value).__name__ == "Decimal":
                row[key] = float(value)
    return rows
