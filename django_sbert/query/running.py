"""``RankedQuerySet``, the base of ``SemanticQuerySet`` (queryset.py): how a built search runs,
however it is evaluated (iteration, ``iterator()``, ``aiterator()``, ``count()``, ``explain()``...):

* ``hnsw.ef_search``, ``hnsw.iterative_scan`` and ``hnsw.max_scan_tuples`` are set with
  ``set_config(..., is_local => true)`` inside a transaction that also runs the query: a
  ``SET LOCAL`` outside a transaction does nothing (pgvector #675); every statement runs under
  ``STATEMENT_TIMEOUT`` (options.py);
* iterative index scans (pgvector >= 0.8) keep scanning until a filtered top-k has k rows;
* with ``relaxed_order`` scans the fetched rows are re-sorted by similarity in Python, since
  the index may return them slightly out of order;
* a text or row search that comes back short because a promotion's switch committed after
  its version was read runs once more, on a copy, with the new version (vectors.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from asgiref.sync import sync_to_async
from django.db import models

from .fusion import KEYWORDS_INSIDE, FusedJoin
from .options import SearchOptions, search_options
from .vectors import QuerySource, rebind, rebound_for


class RankedQuerySet(models.QuerySet):
    """A queryset that runs its search with ``k`` and the search's settings and timeout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._search: SearchOptions | None = None
        # similar_to()'s ordering, to re-sort relaxed_order scans; None for the other searches.
        self._search_ordering: tuple[Any, ...] | None = ()
        # Where the query vector came from (a text or a row), to search again after a switch.
        self._search_source: QuerySource | None = None

    def _clone(self) -> RankedQuerySet:
        clone = super()._clone()
        clone._search = self._search
        clone._search_ordering = self._search_ordering
        clone._search_source = self._search_source
        return clone

    @contextmanager
    def _running(self, *, pipelined: bool = False) -> Iterator[None]:
        """Run the block with ``k`` applied and this search's pgvector settings.

        ``k`` caps the rows only while the statement runs: the queryset's own limits are put back
        afterwards, so after evaluation it can still be filtered, counted or sliced like any
        queryset. ``pipelined``: the block fetches its rows whole on ordinary cursors, so the
        transaction's start, the settings and the statement may share a round trip.
        """
        assert self._search is not None
        query = self.query
        limits = (query.low_mark, query.high_mark)
        if self._search.k is not None and query.high_mark is None:
            query.set_limits(high=int(self._search.k))  # relative to an offset, if any
        try:
            with search_options(self.db, self._search, pipelined=pipelined):
                yield
        finally:
            query.low_mark, query.high_mark = limits

    def _fetch_all(self) -> None:
        if self._search is None or self._result_cache is not None:
            return super()._fetch_all()
        with self._running(pipelined=True):  # rows fetched whole, on a client-side cursor
            super()._fetch_all()
        retry = self._after_switch() if self._came_back_short(self._result_cache) else None
        if retry is not None:
            retry._fetch_all()
            self._result_cache = retry._result_cache
            self._prefetch_done = retry._prefetch_done
        if self._search.iterative_scan == "relaxed_order" and self._ordered_by_distance():
            self._result_cache = _resorted(self._result_cache)

    def _ordered_by_distance(self) -> bool:
        """Still ordered nearest first, as similar_to() left it (not re-ordered or reversed)."""
        return (
            self._search_ordering is not None
            and self.query.standard_ordering
            and self.query.order_by == self._search_ordering
        )

    # A search by a text or a row compares only rows of its vector's encoder version. When a
    # promotion's switch commits between reading that version and running the statement,
    # every row already carries the new one, and the search finds (almost) nothing. So a
    # result that came back short is checked: if the version moved on, the search runs once
    # more, on a copy of this queryset whose SQL carries the new version and its vector.

    def _came_back_short(self, rows: list[Any]) -> bool:
        """Fewer rows than asked for (a slice, or ``k``), or, for a hybrid search, none from
        the vector side (or no way to tell, e.g. ``values_list()``)."""
        if self._search_source is None:
            return False
        query = self.query
        if query.high_mark is not None:
            expected: int | None = query.high_mark - query.low_mark
        else:
            expected = None if self._search.k is None else int(self._search.k)
        if not rows or (expected is not None and len(rows) < expected):
            return True
        return self._is_hybrid() and all(_value(row, "vector_rank") is None for row in rows)

    def _after_switch(self) -> RankedQuerySet | None:
        """A copy of this search bound to the version its rows moved on to, if they did since
        the query vector was read; None otherwise, and for a copy that is already bound."""
        source = self._search_source
        if source is None or rebound_for(self.query, source) is not None:
            return None  # a vector passed in, or the retry itself: once is enough
        rebound = source.moved()
        if rebound is None:
            return None
        retry = self._chain()
        rebind(retry.query, source, rebound)
        return retry

    def _is_hybrid(self) -> bool:
        return any(isinstance(join, FusedJoin) for join in self.query.alias_map.values())

    def _answer(self, method: str) -> Any:
        """``count()`` or ``exists()`` under the search's settings (a hybrid count runs the
        index scans), asked again after a switch when it found nothing."""
        if self._search is None or self._result_cache is not None:
            return getattr(super(), method)()
        with search_options(self.db, self._search):
            answer = getattr(super(), method)()
        retry = None if answer else self._after_switch()
        return answer if retry is None else getattr(retry, method)()

    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        if self._search is None:
            yield from super().iterator(chunk_size)
            return
        if self._is_hybrid():
            # At most 2 * candidates rows: fetched whole, so that the vector side can be
            # checked before any row is handed out.
            rows = self._chain()
            rows._fetch_all()
            yield from rows._result_cache
            return
        found = False
        with self._running():
            for row in super().iterator(chunk_size):
                found = True
                yield row
        retry = None if found else self._after_switch()
        if retry is not None:
            yield from retry.iterator(chunk_size)

    def explain(self, *, format: str | None = None, **options: Any) -> str:
        if self._search is None:
            return super().explain(format=format, **options)
        qs = self
        if self._is_hybrid():  # the whole search in one plan, its keyword side included
            qs = self._chain()
            setattr(qs.query, KEYWORDS_INSIDE, True)
        with qs._running():
            return super(RankedQuerySet, qs).explain(format=format, **options)

    def count(self) -> int:
        return self._answer("count")

    def exists(self) -> bool:
        return self._answer("exists")

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self._search is None:
            return super().aggregate(*args, **kwargs)
        with search_options(self.db, self._search):  # over every matching row, like count()
            return super().aggregate(*args, **kwargs)

    async def aiterator(self, chunk_size: int = 2000) -> AsyncIterator[Any]:
        if self._search is None:
            async for row in super().aiterator(chunk_size):
                yield row
            return
        # Django's aiterator() would bypass k and the search's settings and timeout. Nor can
        # rows be streamed: the settings live in a transaction, which would stay open across
        # awaits while other coroutines' queries run on the same connection. So the (bounded:
        # k or a slice) rows are fetched in one thread-sensitive call, exactly as `async for`
        # does: re-sorted after a relaxed_order scan, prefetched, retried after a switch.
        rows = self._chain()
        await sync_to_async(rows._fetch_all)()
        for row in rows._result_cache:
            yield row


def _value(row: Any, name: str) -> Any:
    """A result row's annotation ``name`` (instance or dict): None when absent or not carried
    (``values_list()``)."""
    return row.get(name) if isinstance(row, dict) else getattr(row, name, None)


def _resorted(rows: list[Any]) -> list[Any]:
    """Sort rows by descending similarity when each carries it (instances or dicts)."""
    keys = [_value(row, "similarity") for row in rows]
    if not rows or any(k is None for k in keys):
        return rows
    order = sorted(range(len(rows)), key=lambda i: -float(keys[i]))  # stable: ties keep order
    return [rows[i] for i in order]
