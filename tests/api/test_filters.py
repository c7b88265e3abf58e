"""SemanticSearchFilter on a user's ModelViewSet: ranking with pagination and other filters."""

from __future__ import annotations

import pytest

from tests.api.conftest import plant
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/articles/"


def ids(body):
    return [row["id"] for row in body["results"]]


def test_without_semantic_the_viewset_is_unchanged(api_client, articles):
    body = api_client.get(URL).json()
    assert body["count"] == len(articles)
    assert ids(body) == [a.pk for a in articles[:2]]
    assert "similarity" not in body["results"][0]


def test_semantic_ranks_all_rows_across_pages(api_client, articles):
    target = articles[6]
    plant(target, "the election vote")
    expected = list(
        Article.objects.similar_to("the election vote", k=100).values_list("pk", flat=True)
    )
    first = api_client.get(URL, {"semantic": "the election vote"}).json()
    # The rows the ranking yields (all eight with a healthy index; see the note below).
    assert first["count"] == len(expected)
    pages = [first] + [
        api_client.get(URL, {"semantic": "the election vote", "page": n}).json()
        for n in range(2, (len(expected) + 1) // 2 + 1)
    ]
    ranked = [pk for page in pages for pk in ids(page)]
    assert ranked == expected
    assert ranked[0] == target.pk
    first = pages[0]["results"][0]
    assert first["similarity"] == pytest.approx(1.0, abs=1e-5)
    # Counted from the same ranking as the pages: rows that earlier tests inserted and rolled
    # back stay in the HNSW graph (no VACUUM inside a test) and can cut what an index scan of
    # this small table yields; count and pages then agree rather than count all eight rows.


def test_semantic_with_other_filters(api_client, articles):
    plant(articles[4], "a big dog")
    body = api_client.get(URL, {"semantic": "a big dog", "category": "pets"}).json()
    assert body["count"] == 2
    assert ids(body) == [articles[4].pk, articles[3].pk]
    searched = api_client.get(URL, {"semantic": "a big dog", "search": "dog"}).json()
    assert set(ids(searched)) <= {articles[3].pk, articles[4].pk}
    assert ids(searched)[0] == articles[4].pk


def test_semantic_wins_over_a_default_ordering_before_it(api_client, articles):
    plant(articles[7], "court and law")
    body = api_client.get(URL, {"semantic": "court and law", "ordering": "title"}).json()
    assert ids(body)[0] == articles[7].pk


def test_rows_without_embedding_are_left_out(api_client, articles):
    Article.objects.create(title="fresh", category="pets")
    assert api_client.get(URL, {"category": "pets"}).json()["count"] == 3
    assert api_client.get(URL, {"category": "pets", "semantic": "dog"}).json()["count"] == 2


def test_blank_semantic_is_ignored(api_client, articles):
    assert ids(api_client.get(URL, {"semantic": "  "}).json()) == [a.pk for a in articles[:2]]


def test_too_long_semantic_is_400(api_client, articles, settings):
    settings.SBERT = {**settings.SBERT, "SEARCH": {"MAX_QUERY_LENGTH": 10}}
    response = api_client.get(URL, {"semantic": "x" * 11})
    assert response.status_code == 400
    assert "Longer than 10 characters" in response.json()["semantic"]


def test_unpaginated_view_gets_its_semantic_search_k(api_client, articles):
    body = api_client.get("/all-articles/", {"semantic": "dog"}).json()
    assert len(body) == 3  # UnpaginatedArticleViewSet.semantic_search_k
    assert len(api_client.get("/all-articles/").json()) == len(articles)


def test_detail_routes_are_not_ranked(api_client, articles):
    response = api_client.get(f"{URL}{articles[0].pk}/", {"semantic": "dog"})
    assert response.status_code == 200


def test_paging_through_semantic_results_stops_at_max_k(api_client, articles, settings):
    """The paginator pages through the top MAX_K rows only: the count is bounded (its
    SQL carries the LIMIT), and a page past them is 404 saying why."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.SBERT = {**settings.SBERT, "API": {"MAX_K": 3}}
    expected = list(Article.objects.similar_to("dog", k=3).values_list("pk", flat=True))
    with CaptureQueriesContext(connection) as queries:
        first = api_client.get(URL, {"semantic": "dog"}).json()
    assert 0 < first["count"] == len(expected) <= 3  # cut at MAX_K, not all 8 rows
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 3" in sql for sql in counts)
    ranked = ids(first)
    if len(expected) > 2:
        ranked += ids(api_client.get(URL, {"semantic": "dog", "page": 2}).json())
    assert ranked == expected
    for page in (3, 100_000):
        response = api_client.get(URL, {"semantic": "dog", "page": page})
        assert response.status_code == 404
        assert "['MAX_K']" in response.json()["detail"]


def test_paging_depth_defaults_to_max_k(api_client, articles):
    """A client pages no deeper than MAX_K (100) rows."""
    assert api_client.get(URL, {"semantic": "dog", "page": 50}).status_code == 404  # 8 rows
    response = api_client.get(URL, {"semantic": "dog", "page": 51})  # first row: the 101st
    assert response.status_code == 404 and "['MAX_K']" in response.json()["detail"]
    assert api_client.get(f"{URL}{articles[0].pk}/", {"semantic": "dog"}).status_code == 200
