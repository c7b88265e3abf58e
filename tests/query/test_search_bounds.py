"""What a search may cost: a keyword search ranks a bounded number of rows, and every search
statement runs under SBERT["SEARCH"]["STATEMENT_TIMEOUT"] (issue 14, item 9).

The slow statements here are real: a filter that sleeps in PostgreSQL for each row it is
evaluated on, so the statement really runs past the timeout and PostgreSQL cancels it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.db.models import Avg

from django_sbert.keyword.tsquery import clear_statistics_cache
from django_sbert.query import SearchTimeout, as_semantic
from tests.query.test_query import search_settings
from tests.testapp.models import Article

MOST = 60  # rows holding the common word
CAP = 20  # KEYWORD_MAX_ROWS in these tests


@pytest.fixture
def common_word(db) -> list[Article]:
    """MOST rows that all hold "rates"; the last five are in category "rare"."""
    rows = Article.objects.bulk_create(
        Article(
            title=f"interest rates {n}",
            body="rates rise and rates fall " * (1 + n % 4),
            category="rare" if n >= MOST - 5 else "common",
        )
        for n in range(MOST)
    )
    Article.objects.create(title="guitar music", body="a man plays", category="music")
    clear_statistics_cache()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE testapp_article")  # "rates" is in almost every row
    yield rows
    clear_statistics_cache()


def ranked_rows(queryset: Any) -> float:
    """How many rows the statement computed a keyword rank for (from EXPLAIN ANALYZE): the
    input of the sort by that rank."""
    plan = json.loads(queryset.explain(format="json", analyze=True))

    def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(n for child in node.get("Plans", []) for n in walk(child))]

    nodes = walk(plan[0]["Plan"])
    ranked = [  # ts_rank_cd (match="all") or the idf sub-select (match="any")
        n
        for n in nodes
        if n["Node Type"] == "Sort" and any(w in n["Sort Key"][0] for w in ("ts_rank", "SubPlan"))
    ]
    assert ranked, f"no sort by the keyword rank in {nodes}"
    return max(child["Actual Rows"] for n in ranked for child in n["Plans"])


@pytest.mark.parametrize("match", ["all", "any"])
def test_keyword_search_on_a_word_most_rows_hold_ranks_at_most_keyword_max_rows(common_word, match):
    """Item 9: however many rows hold the words, one keyword search ranks at most
    KEYWORD_MAX_ROWS of them (before the cap every one of the MOST rows was ranked)."""
    with search_settings(KEYWORD_MAX_ROWS=CAP):
        qs = Article.objects.keyword_search("rates", match=match)
        assert qs.count() == CAP
        assert ranked_rows(qs[:10]) == CAP
        results = list(qs[:10])
    assert len(results) == 10
    assert all("rates" in row.title for row in results)
    scores = [row.keyword_score for row in results]
    assert scores == sorted(scores, reverse=True)
    assert f"LIMIT {CAP}" in str(qs.query)
    # without the cap setting, the default (10,000) leaves this small table whole
    assert Article.objects.keyword_search("rates", match=match).count() == MOST


def test_the_cap_keeps_rows_the_queryset_can_return(common_word):
    """Filters chained before or after keyword_search() are in the capped sub-select, so a
    filter that keeps rows outside the first KEYWORD_MAX_ROWS matches still finds them."""
    with search_settings(KEYWORD_MAX_ROWS=CAP):
        after = Article.objects.keyword_search("rates").filter(category="rare")
        before = Article.objects.filter(category="rare").keyword_search("rates")
        assert after.count() == before.count() == 5
        assert {a.pk for a in after} == {a.pk for a in common_word[-5:]}
        excluded = Article.objects.exclude(category="common").keyword_search("rates", k=50)
        assert len(list(excluded)) == 5


def test_hybrid_keyword_side_ranks_at_most_keyword_max_rows(common_word):
    with search_settings(KEYWORD_MAX_ROWS=CAP):
        rows = list(Article.objects.hybrid_search("rates", k=100))
    assert sum(1 for row in rows if row.keyword_rank is not None) == CAP
    assert max(row.keyword_rank for row in rows if row.keyword_rank is not None) == CAP


# -- the statement timeout ---------------------------------------------------------------------


def slow(queryset: Any = None) -> Any:
    """``queryset`` with a filter that sleeps 50 ms in PostgreSQL for each row it checks."""
    queryset = Article.objects.all() if queryset is None else queryset
    return queryset.extra(where=["pg_sleep(0.05) IS NOT NULL"])


@pytest.fixture
def embedded(db, embed) -> list[Article]:
    rows = [
        Article.objects.create(title=f"interest rates {n}", body="prices rise", category="economy")
        for n in range(4)
    ]
    return list(embed(*rows))


SEARCHES = {
    "similar_to(text)": lambda qs, row: list(qs.similar_to("interest rates")),
    "similar_to(vector)": lambda qs, row: list(qs.similar_to(list(row.embedding))),
    "similar_to(instance)": lambda qs, row: list(qs.similar_to(row)),
    "keyword_search(all)": lambda qs, row: list(qs.keyword_search("interest rates")),
    "keyword_search(any)": lambda qs, row: list(qs.keyword_search("rates", match="any")),
    "hybrid_search": lambda qs, row: list(qs.hybrid_search("interest rates")),
    "slice": lambda qs, row: list(qs.similar_to("rates")[1:3]),
    "count()": lambda qs, row: qs.similar_to("rates").count(),
    "exists()": lambda qs, row: qs.similar_to("rates").exists(),
    "iterator()": lambda qs, row: list(qs.similar_to("rates").iterator()),
    "values_list()": lambda qs, row: list(qs.similar_to("rates").values_list("pk", flat=True)),
    "aggregate()": lambda qs, row: qs.similar_to("rates").aggregate(Avg("similarity")),
    "hybrid count()": lambda qs, row: qs.hybrid_search("rates").count(),
    # the admin's similar items: any queryset made searchable, more like one row
    "as_semantic().similar_to(instance)": lambda qs, row: list(
        as_semantic(qs.order_by("title")).similar_to(row, k=3)
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(SEARCHES))
def test_every_search_path_is_cancelled_at_the_statement_timeout(embedded, name):
    """Item 9: whatever evaluates a search, a statement past STATEMENT_TIMEOUT is cancelled
    by PostgreSQL and raises SearchTimeout, and the connection stays usable."""
    row = Article.objects.defer(None).get(pk=embedded[0].pk)
    with search_settings(STATEMENT_TIMEOUT=0.02), pytest.raises(SearchTimeout, match="0.02 s"):
        SEARCHES[name](slow(), row)
    # the same search without the sleep runs, on the same connection, within the timeout
    with search_settings(STATEMENT_TIMEOUT=2):
        SEARCHES[name](Article.objects.all(), row)
    assert show_timeout() == "0"  # the timeout was local to the search's transaction


@pytest.mark.django_db(transaction=True)
def test_aiterator_runs_under_the_statement_timeout_and_k(embedded):
    async def consume(queryset: Any) -> list[Article] | BaseException:
        try:
            return [row async for row in queryset.aiterator()]
        except BaseException as exc:  # noqa: BLE001 - returned, to close the connection first
            return exc
        finally:
            await sync_to_async(connections.close_all)()  # the executor thread's connection

    with search_settings(STATEMENT_TIMEOUT=0.02):
        failed = asyncio.run(consume(slow().similar_to("interest rates")))
    assert isinstance(failed, SearchTimeout)
    rows = asyncio.run(consume(Article.objects.similar_to("interest rates", k=2)))
    assert len(rows) == 2  # k applies, as for iterator()


def show_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]
