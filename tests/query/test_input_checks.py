"""Bad input fails at the call with a ValueError naming the problem, and evaluating a search
queryset leaves it usable like any queryset (issue 14, items 10 and 11)."""

from __future__ import annotations

import math

import pytest
from django.db import connection

from django_sbert.query import SearchTimeout
from tests.query.test_query import DIM, articles  # noqa: F401  (fixture)
from tests.testapp.models import Article


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_vector_with_nan_or_infinity_is_refused_at_the_call(db, bad):
    vector = [0.1] * DIM
    vector[3] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        Article.objects.similar_to(vector)


def test_a_vector_of_the_wrong_size_is_refused_at_the_call(db):
    with pytest.raises(ValueError, match=f"has 3 dimensions but .* holds {DIM}"):
        Article.objects.similar_to([0.1, 0.2, 0.3])


@pytest.mark.parametrize("method", ["keyword_search", "hybrid_search"])
def test_a_nul_character_in_a_search_text_is_refused_at_the_call(db, method):
    with pytest.raises(ValueError, match="NUL"):
        getattr(Article.objects, method)("interest\x00rates")


def test_a_search_queryset_can_be_filtered_and_counted_after_evaluation(articles):  # noqa: F811
    qs = Article.objects.similar_to("interest rates", k=2)
    first = list(qs)
    assert len(first) == 2
    economy = qs.filter(category="economy")  # no "slice has been taken" error
    assert {a.category for a in economy} == {"economy"}
    assert qs.count() == 2  # the cached result, like any evaluated queryset
    again = Article.objects.similar_to("interest rates", k=2)
    list(again)
    assert again.query.high_mark is None and again.query.low_mark == 0
    assert list(again.all()[:1]) == first[:1]  # a clone slices and runs like any queryset


def test_a_search_queryset_iterated_without_cache_is_not_changed(articles):  # noqa: F811
    qs = Article.objects.similar_to("interest rates", k=2)
    assert len(list(qs.iterator())) == 2
    assert qs.query.high_mark is None
    assert qs.filter(category="economy").count() >= 1


@pytest.mark.django_db(transaction=True)
def test_every_search_runs_under_the_statement_timeout(articles):  # noqa: F811
    from tests.query.test_query import search_settings

    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        if "<=>" in sql:  # the search itself (not the read of the serving version)
            with context["connection"].connection.cursor() as cursor:
                cursor.execute("SHOW statement_timeout")
                seen.append(cursor.fetchone()[0])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        list(Article.objects.similar_to("interest rates"))
    with search_settings(STATEMENT_TIMEOUT=2.5), connection.execute_wrapper(wrapper):
        list(Article.objects.similar_to("interest rates"))
    assert seen == ["5s", "2500ms"]
    assert show_timeout() == "0"  # transaction-local: nothing leaks to the connection


@pytest.mark.django_db(transaction=True)
def test_a_search_past_the_statement_timeout_raises_a_clear_error(articles):  # noqa: F811
    from tests.query.test_query import search_settings

    slow = Article.objects.extra(where=["pg_sleep(0.05) IS NOT NULL"])  # 50 ms a row
    with search_settings(STATEMENT_TIMEOUT=0.02), pytest.raises(SearchTimeout, match="0.02 s"):
        list(slow.similar_to("interest rates"))
    with search_settings(STATEMENT_TIMEOUT=0.02), pytest.raises(SearchTimeout):
        list(slow.keyword_search("interest"))
    assert len(list(Article.objects.similar_to("interest rates", k=2))) == 2  # connection fine


def show_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]
