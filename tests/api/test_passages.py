"""search/ on a model whose field has passages=: each result carries its best passage and
where it lies in the row's text, in vector and hybrid mode, when the registration may show it
(tests.testapp.models.Report, whose text is its title and body)."""

from __future__ import annotations

import pytest

from django_sbert import indexing
from django_sbert.api import registry
from tests.testapp.models import Report

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/api/sbert/search/"
BODIES = [
    "The central bank will raise interest rates this year. The market was falling.",
    "The dog runs fast and the cat is slow. A child plays guitar and the man eats food.",
    "The party will win the election in the city. The war is over and peace is back.",
    "A woman is playing music in the old car. Big cars are bad for the economy.",
]


@pytest.fixture
def reports() -> list[Report]:
    rows = Report.objects.bulk_create(
        Report(title=f"report {i}", body=body * 3) for i, body in enumerate(BODIES)
    )
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    return rows


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_results_carry_the_best_passage_and_its_offsets(api_client, reports, mode):
    registry.register(Report, fields=["id", "title", "body"])  # the whole source is listed
    text = "the dog runs fast"
    response = api_client.get(URL, {"model": "testapp.report", "q": text, "k": 4, "mode": mode})
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    assert len(results) == 4
    if mode == "vector":
        expected = list(Report.objects.similar_to(text, k=4))
    else:
        expected = list(Report.objects.hybrid_search(text, k=4))
    assert [r["id"] for r in results] == [row.pk for row in expected]
    for result, row in zip(results, expected, strict=True):
        passage = result["passage"]
        assert passage == row.passage
        assert set(passage) == {"text", "start", "end", "index"}
        source = f"{row.title}\n{row.body}"
        assert source[passage["start"] : passage["end"]] == passage["text"]
        assert result["similarity"] == pytest.approx(row.similarity, abs=1e-6)
        assert set(result["object"]) == {"id", "title", "body"}


@pytest.mark.parametrize("passages", [None, True])
def test_a_passage_shows_only_what_the_registration_allows(api_client, reports, passages):
    """The body is not listed: by default no passage (it is text of the body), unless the
    registration says passages=True."""
    registry.register(Report, fields=["id", "title"], passages=passages)
    response = api_client.get(URL, {"model": "testapp.report", "q": "the dog", "k": 3})
    results = response.json()["results"]
    assert len(results) == 3
    assert all(("passage" in result) is bool(passages) for result in results)


def test_a_field_without_passages_has_no_passage_in_its_results(api_client, articles, registered):
    registered()
    response = api_client.get(URL, {"model": "testapp.article", "q": "dog", "k": 3})
    assert all("passage" not in result for result in response.json()["results"])
