"""GET suggest/<model>/: prefix matching, blending with vector search, throttle, limits, access."""

from __future__ import annotations

import pytest
from rest_framework.permissions import IsAuthenticated

from django_sbert.api.settings import APISettings
from django_sbert.conf import SEARCH_DEFAULTS
from tests.api.conftest import plant
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/api/sbert/suggest/testapp.article/"


def suggest(client, **params):
    return client.get(URL, params)


def ids(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [r["id"] for r in response.json()["results"]]


def test_an_unfinished_word_matches_as_a_prefix(api_client, articles, registered):
    registered()
    response = suggest(api_client, q="guit")
    results = response.json()["results"]
    assert ids(response)[0] == articles[5].pk  # "guitar music"
    top = results[0]
    assert top["keyword_rank"] == 1
    assert top["label"] == "guitar music"  # the first source field, listed in fields
    assert top["url"] is None  # the test model has no get_absolute_url()
    assert top["object"] == {"id": articles[5].pk, "title": "guitar music", "category": "music"}
    assert set(top) == {"id", "label", "url", "score", "keyword_rank", "vector_rank", "object"}


def test_finished_words_must_all_occur_and_the_last_one_narrows(api_client, articles, registered):
    registered()
    both = suggest(api_client, q="inter", k=20).json()["results"]
    assert {r["id"] for r in both if r["keyword_rank"]} == {articles[0].pk, articles[1].pk}
    fall = suggest(api_client, q="interest rates fa", k=20).json()["results"]
    assert [r["id"] for r in fall if r["keyword_rank"]] == [articles[1].pk]  # "... fall"
    # A space after the last word: it is finished, matched whole (stemmed), not as a prefix.
    finished = suggest(api_client, q="interest ra ", k=20).json()["results"]
    assert [r["id"] for r in finished if r["keyword_rank"]] == []


def test_a_word_typed_past_its_stem_is_still_found(api_client, articles, registered):
    registered()
    # "running" and "runs" are stored as the stem "run"; "runnin" is no prefix of it.
    found = suggest(api_client, q="dog runnin", k=20).json()["results"]
    assert [r["id"] for r in found if r["keyword_rank"]] == [articles[4].pk]


def test_short_texts_use_the_prefix_match_alone(api_client, articles, registered):
    registered()
    results = suggest(api_client, q="cen", k=20).json()["results"]
    assert [r["id"] for r in results] == [articles[0].pk]  # "central banks ..."
    assert results[0]["vector_rank"] is None
    assert suggest(api_client, q="c").json() == {"results": []}  # one letter: nothing
    assert suggest(api_client, q="   ").json() == {"results": []}
    assert suggest(api_client, q="").json() == {"results": []}


def test_vector_search_finds_what_the_words_do_not(api_client, articles, registered):
    registered()
    target = articles[2]
    plant(target, "zebra quantum")  # words no row holds
    results = suggest(api_client, q="zebra quantum", k=3).json()["results"]
    assert results[0]["id"] == target.pk
    assert results[0]["vector_rank"] == 1 and results[0]["keyword_rank"] is None
    assert all(r["keyword_rank"] is None for r in results)


def test_both_sides_are_fused(api_client, articles, registered):
    registered()
    meaning = articles[3]
    plant(meaning, "guitar musi")  # the nearest row by meaning holds neither word
    results = suggest(api_client, q="guitar musi", k=20).json()["results"]
    by_id = {r["id"]: r for r in results}
    assert results[0]["id"] == articles[5].pk and results[0]["keyword_rank"] == 1
    assert by_id[meaning.pk]["vector_rank"] == 1 and by_id[meaning.pk]["keyword_rank"] is None
    k = SEARCH_DEFAULTS["FUSION"]["RRF_K"]
    for row in results:  # reciprocal rank fusion: 1 / (k + rank) from each side that found it
        ranks = [r for r in (row["keyword_rank"], row["vector_rank"]) if r is not None]
        assert ranks and row["score"] == pytest.approx(sum(1 / (k + r) for r in ranks))
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_matches_the_queryset_method(api_client, articles, registered):
    registered()
    expected = [s.pk for s in Article.objects.suggest("the dog r", k=5)]
    assert ids(suggest(api_client, q="the dog r", k=5)) == expected


def test_no_input_breaks_the_prefix_query(api_client, articles, registered):
    registered()
    for text in ["?!", "a & b | !c:* (", "'", "\\", "dog's ru", "‘quoted’ ca", "x_y_z", "-"]:
        assert suggest(api_client, q=text).status_code == 200, text


def test_k_bounds(api_client, articles, registered, monkeypatch):
    registered()
    assert len(ids(suggest(api_client, q="the dog", k=2))) == 2
    assert len(ids(suggest(api_client, q="the dog"))) == 5  # SEARCH["SUGGEST"]["K"]
    for bad in (0, -1, 21, "x", 1.5):
        response = suggest(api_client, q="the dog", k=bad)
        assert response.status_code == 400 and "k" in response.json(), bad
    monkeypatch.setattr(APISettings, "SUGGEST_MAX_K", 3)
    assert "at most 3" in suggest(api_client, q="dog", k=4).json()["k"][0]
    assert suggest(api_client, q="dog", k="").status_code == 200  # empty: not given


def test_missing_and_overlong_q(api_client, articles, registered, settings):
    registered()
    missing = api_client.get(URL)
    assert missing.status_code == 400 and "q" in missing.json()
    long = suggest(api_client, q="a" * 201)
    assert long.status_code == 400
    assert "longer than 200 characters; suggestions" in long.json()["q"][0]
    assert suggest(api_client, q="a" * 200).status_code == 200
    nul = suggest(api_client, q="dog\x00")
    assert nul.status_code == 400


def test_its_throttle_scope_is_not_searchs(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {
        **settings.SBERT,
        "RATES": {"search": "1/minute", "suggest": "3/minute"},
    }
    search = "/api/sbert/search/"
    assert api_client.get(search, {"model": "testapp.article", "q": "dog"}).status_code == 200
    assert api_client.get(search, {"model": "testapp.article", "q": "dog"}).status_code == 429
    # Searching used up its own rate, not suggest/'s: three keystrokes pass, the fourth waits.
    for text in ("do", "dog", "dog r"):
        assert suggest(api_client, q=text).status_code == 200
    throttled = suggest(api_client, q="dog ru")
    assert throttled.status_code == 429 and "Retry-After" in throttled


def test_default_rate_lets_typing_through(api_client, articles, registered):
    from django_sbert.conf import sbert_settings  # read with the test's settings

    registered()
    assert sbert_settings.RATES["suggest"] == "600/minute"
    assert sbert_settings.RATES["search"] == "120/minute"
    text = "central banks raise interest rates"  # one request per character typed
    codes = {suggest(api_client, q=text[:n]).status_code for n in range(1, len(text) + 1)}
    assert codes == {200}


def test_only_registered_models_and_rows_the_client_may_see(client_as, articles, registered):
    anonymous = client_as("anonymous")
    unknown = anonymous.get("/api/sbert/suggest/testapp.nope/", {"q": "dog"})
    assert unknown.status_code == 404
    assert "Searchable" not in unknown.json()["detail"]
    assert suggest(anonymous, q="dog").status_code == 404  # not registered yet

    registered(queryset=lambda request: Article.objects.filter(published=True))
    hidden = articles[-1]  # "court and law", unpublished
    plant(hidden, "court and law")
    found = ids(suggest(anonymous, q="court and law", k=20))
    assert hidden.pk not in found
    assert hidden.pk not in ids(suggest(anonymous, q="cou"))  # by its words alone


def test_permission_classes_of_the_registration(client_as, articles, registered):
    registered(permission_classes=[IsAuthenticated])
    assert suggest(client_as("anonymous"), q="dog").status_code in (401, 403)
    assert suggest(client_as("user"), q="dog").status_code == 200


def test_the_label_needs_its_field_among_the_registered_ones(api_client, articles, registered):
    registered(fields=["id", "category"])
    results = suggest(api_client, q="guit").json()["results"]
    assert results[0]["id"] == articles[5].pk
    assert results[0]["label"] is None  # the title is not among the fields shown
    assert results[0]["object"] == {"id": articles[5].pk, "category": "music"}
