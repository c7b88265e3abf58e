"""GET search/?mode=hybrid|keyword: results, validation, the models that cannot, the schema."""

from __future__ import annotations

import numpy as np
import pytest

from django_sbert.api import registry
from django_sbert.conf import SEARCH_DEFAULTS
from django_sbert.serving import encode_query
from tests.api.conftest import store_vector
from tests.testapp.models import Article, Note

K = SEARCH_DEFAULTS["FUSION"]["RRF_K"]  # rank fusion's k

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/api/sbert/search/"


@pytest.fixture(autouse=True)
def _fresh_column_statistics():
    """Each test reads the tsvector statistics of its own rows (a process caches them)."""
    from django_sbert.keyword.tsquery import clear_statistics_cache

    clear_statistics_cache()
    yield
    clear_statistics_cache()


def search(client, **params):
    return client.get(URL, {"model": "testapp.article", **params})


@pytest.fixture
def code_row(articles) -> Article:
    """A row whose only tie to "XJ-9000" is the exact code: its vector points away from it."""
    row = Article.objects.create(title="XJ-9000 spare parts", body="catalogue", category="shop")
    store_vector(row, -np.asarray(encode_query("XJ-9000")))
    return row


def test_hybrid_finds_the_exact_code_and_shows_how_it_ranked(api_client, code_row, registered):
    registered()
    vector = search(api_client, q="XJ-9000", k=9, page_size=9).json()["results"]
    assert vector[-1]["id"] == code_row.pk  # vector search alone ranks it last

    response = search(api_client, q="XJ-9000", mode="hybrid", k=5)
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    top = results[0]
    assert top["id"] == code_row.pk
    assert set(top) == {
        "id",
        "score",
        "similarity",
        "vector_rank",
        "keyword_rank",
        "keyword_score",
        "object",
    }
    assert top["keyword_rank"] == 1 and top["vector_rank"] == 9  # 9 rows with vectors
    assert top["score"] == pytest.approx(1 / (K + 1) + 1 / (K + 9))  # RRF
    assert top["similarity"] == pytest.approx(-1.0, abs=1e-5)
    assert set(top["object"]) == {"id", "title", "category"}
    assert [r["keyword_rank"] for r in results[1:]] == [None] * 4
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_keyword_mode_uses_web_search_syntax(api_client, code_row, registered):
    registered()
    body = search(api_client, q="xj-9000", mode="keyword").json()
    assert [r["id"] for r in body["results"]] == [code_row.pk]
    assert set(body["results"][0]) == {"id", "keyword_score", "object"}
    assert body["count"] == 1
    phrase = search(api_client, q='"interest rates" -fall', mode="keyword").json()
    assert [r["object"]["title"] for r in phrase["results"]] == [
        "central banks raise interest rates"
    ]
    for text in ("?!", '"', "-", "or"):  # nothing to search for: no rows, no error
        response = search(api_client, q=text, mode="keyword")
        assert response.status_code == 200 and response.json()["count"] == 0


def test_modes_respect_the_registered_queryset(api_client, code_row, registered):
    registered(queryset=Article.objects.filter(published=True).exclude(pk=code_row.pk))
    for mode in ("hybrid", "keyword"):
        ids = [r["id"] for r in search(api_client, q="XJ-9000", mode=mode).json()["results"]]
        assert code_row.pk not in ids
    unpublished = Article.objects.get(published=False)
    ids = [r["id"] for r in search(api_client, q="court law", mode="hybrid").json()["results"]]
    assert unpublished.pk not in ids  # "court and law" is the unpublished article


def test_vector_mode_is_the_default_and_unchanged(api_client, articles, registered):
    registered()
    default = search(api_client, q="dog").json()
    explicit = search(api_client, q="dog", mode="vector").json()
    blank = search(api_client, q="dog", mode="").json()
    assert default == explicit == blank
    assert set(default["results"][0]) == {"id", "similarity", "object"}


@pytest.mark.parametrize(
    ("params", "key", "message"),
    [
        ({"mode": "fuzzy"}, "mode", "Unknown mode 'fuzzy'; use one of: vector, hybrid, keyword."),
        ({"mode": "HYBRID"}, "mode", "Unknown mode"),
        ({"mode": "hybrid", "min_similarity": "0.5"}, "min_similarity", "mode=vector only"),
        ({"mode": "keyword", "min_similarity": "0.5"}, "min_similarity", "mode=vector only"),
        ({"mode": "keyword", "k": "0"}, "k", "greater than or equal to 1"),
    ],
)
def test_bad_modes_are_400(api_client, articles, registered, params, key, message):
    registered()
    response = search(api_client, q="dog", **params)
    assert response.status_code == 400
    assert message in str(response.json()[key])


def test_models_without_full_text_get_400_for_keyword_modes(api_client, db):
    registry.register(Note, fields=["id", "text"])
    for mode in ("hybrid", "keyword"):
        response = api_client.get(URL, {"model": "testapp.note", "q": "cats", "mode": mode})
        assert response.status_code == 400
        message = str(response.json()["mode"])
        assert f"mode={mode} needs full-text search" in message
        assert "keyword_search=True" in message and "mode=vector" in message
    ok = api_client.get(URL, {"model": "testapp.note", "q": "cats"})
    assert ok.status_code == 200


def test_pages_split_the_hybrid_ranking(api_client, code_row, registered):
    registered()
    whole = search(api_client, q="XJ-9000 rates", mode="hybrid", k=6, page_size=6).json()
    pages = [
        search(api_client, q="XJ-9000 rates", mode="hybrid", k=6, page_size=4, page=n).json()
        for n in (1, 2)
    ]
    assert [r["id"] for p in pages for r in p["results"]] == [r["id"] for r in whole["results"]]
    assert whole["count"] == 6


def test_schema_documents_the_mode_and_each_result_shape(api_client, registered):
    pytest.importorskip("drf_spectacular")
    registered()
    schema = api_client.get("/api/sbert/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/sbert/search/"]["get"]
    mode = next(p for p in operation["parameters"] if p["name"] == "mode")
    assert mode["schema"]["enum"] == ["vector", "hybrid", "keyword"]
    assert mode["schema"]["default"] == "vector"
    components = schema["components"]["schemas"]
    hybrid = components["HybridResult"]["properties"]
    assert {"score", "similarity", "vector_rank", "keyword_rank", "keyword_score"} <= set(hybrid)
    assert hybrid["similarity"]["nullable"] is True
    assert "keyword_score" in components["KeywordResult"]["properties"]
    results = components["SemanticSearchResponse"]["properties"]["results"]
    assert results["items"] == {"$ref": "#/components/schemas/SemanticSearchResult"}
    shapes = [ref["$ref"].rsplit("/", 1)[1] for ref in components["SemanticSearchResult"]["oneOf"]]
    assert shapes == ["SearchResult", "HybridResult", "KeywordResult"]


def test_filter_backend_ranks_by_the_views_mode(code_row):
    from rest_framework.test import APIRequestFactory
    from rest_framework.views import APIView

    from django_sbert.api.filters import SemanticSearchFilter

    class View(APIView):
        semantic_search_mode = "hybrid"

    request = APIView().initialize_request(APIRequestFactory().get("/", {"semantic": "XJ-9000"}))
    backend = SemanticSearchFilter()
    hybrid = list(backend.filter_queryset(request, Article.objects.all(), View()))
    assert hybrid[0] == code_row and hybrid[0].keyword_rank == 1
    View.semantic_search_mode = "keyword"
    assert list(backend.filter_queryset(request, Article.objects.all(), View())) == [code_row]
    View.semantic_search_mode = "vector"
    assert list(backend.filter_queryset(request, Article.objects.all(), View()))[-1] == code_row
    View.semantic_search_mode = "fuzzy"
    with pytest.raises(Exception, match="semantic_search_mode is 'fuzzy'"):
        backend.filter_queryset(request, Article.objects.all(), View())


def test_keyword_search_reveals_words_of_unreturned_source_fields_as_documented(
    api_client, articles
):
    """A word found only in a source field the results do not show still finds the row: the
    behaviour docs/security.md warns about ("What a client can learn")."""
    from pathlib import Path

    row = Article.objects.create(title="board minutes", body="the merger with xylocorp")
    registry.register(Article, fields=["id", "title"])
    found = search(api_client, q="xylocorp", mode="keyword").json()["results"]
    assert [r["id"] for r in found] == [row.pk]
    assert "xylocorp" not in str(found)
    security = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    assert "Keyword search matches words of every source field, returned or not." in security
