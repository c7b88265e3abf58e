"""``hybrid_search(fusion=FusionConfig(...), keyword=KeywordConfig(...))``: the same ranking as
the keyword arguments that name the same options, on the real database."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from django_sbert.query import FusionConfig, KeywordConfig
from tests.query.test_hybrid import _fresh_column_statistics, articles  # noqa: F401 - fixtures
from tests.testapp.models import Article

CASES = [
    (FusionConfig(), KeywordConfig(), {}),
    (
        FusionConfig(method="rrf", rrf_k=0, keyword_weight=0.5),
        None,
        {"fusion": "rrf", "rrf_k": 0, "keyword_weight": 0.5},
    ),
    (FusionConfig(rrf_k=10), None, {"rrf_k": 10}),
    (FusionConfig(candidates=2), None, {"candidates": 2}),
    (FusionConfig(vector_weight=0), None, {"vector_weight": 0}),
    (
        FusionConfig(method="linear", vector_weight=0.6, keyword_weight=0.4, candidates=2),
        None,
        {"fusion": "linear", "vector_weight": 0.6, "keyword_weight": 0.4, "candidates": 2},
    ),
    (None, KeywordConfig(match="any", max_df=0.9), {"match": "any", "max_df": 0.9}),
    (
        FusionConfig(method="linear", keyword_weight=2.0),
        KeywordConfig(match="all"),
        {"fusion": "linear", "keyword_weight": 2.0, "match": "all"},
    ),
]


# Written for rank fusion (tests/conftest.py, RANK_FUSION).
pytestmark = pytest.mark.usefixtures("rank_fusion")


def ranking(qs) -> list[tuple]:
    return [(r.pk, round(r.score, 9), r.vector_rank, r.keyword_rank) for r in qs]


@pytest.mark.parametrize(("fusion", "keyword", "arguments"), CASES)
def test_configs_rank_as_the_keyword_arguments_do(articles, fusion, keyword, arguments):  # noqa: F811
    by_configs = ranking(
        Article.objects.hybrid_search("XJ-9000 prices", fusion=fusion, keyword=keyword)
    )
    by_arguments = ranking(Article.objects.hybrid_search("XJ-9000 prices", **arguments))
    assert by_configs == by_arguments
    assert len(by_configs) >= 2


def test_a_config_changes_the_ranking_it_should(articles):  # noqa: F811
    """Not a no-op: weighting the keyword side alone puts the keyword match first."""
    keyword_only = Article.objects.hybrid_search("XJ-9000", fusion=FusionConfig(vector_weight=0))
    vector_only = Article.objects.hybrid_search("XJ-9000", fusion=FusionConfig(keyword_weight=0))
    assert keyword_only.first() == articles[0]
    assert vector_only.first() == articles[1]


def test_an_option_given_both_ways_is_refused(db):
    with pytest.raises(TypeError, match="rrf_k both in fusion="):
        Article.objects.hybrid_search("x", fusion=FusionConfig(rrf_k=1), rrf_k=2)
    with pytest.raises(TypeError, match="match both in keyword="):
        Article.objects.hybrid_search("x", keyword=KeywordConfig(match="any"), match="all")
    with pytest.raises(TypeError, match="keyword must be a KeywordConfig"):
        Article.objects.hybrid_search("x", keyword={"match": "any"})


def test_bad_values_in_a_config_are_refused_as_before(db):
    for bad in (FusionConfig(candidates=0), FusionConfig(rrf_k=-1), FusionConfig(method="borda")):
        with pytest.raises(ValueError):
            Article.objects.hybrid_search("XJ-9000", fusion=bad)
    with pytest.raises(ValueError):
        Article.objects.hybrid_search("XJ-9000", keyword=KeywordConfig(match="some"))


def test_the_configs_are_small_frozen_dataclasses():
    config = FusionConfig(method="rrf", rrf_k=60)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.rrf_k = 1  # type: ignore[misc]
    assert dataclasses.replace(config, rrf_k=10) == FusionConfig(method="rrf", rrf_k=10)
    assert KeywordConfig() == KeywordConfig(match=None, max_df=None)


def test_the_options_as_keyword_arguments_are_deprecated(articles):  # noqa: F811
    """rrf_k=, match=... still rank as the configs do, with a DeprecationWarning; the configs
    and the method's name alone do not warn."""
    with pytest.warns(DeprecationWarning, match=r"hybrid_search\(rrf_k=, match=\.\.\.\)"):
        loose = ranking(Article.objects.hybrid_search("XJ-9000", rrf_k=10, match="any"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        configs = ranking(
            Article.objects.hybrid_search(
                "XJ-9000", fusion=FusionConfig(rrf_k=10), keyword=KeywordConfig(match="any")
            )
        )
        Article.objects.hybrid_search("XJ-9000", fusion="linear").first()
    assert loose == configs


def test_a_config_takes_its_defaults_and_rules_from_its_settings_group(settings):
    settings.SBERT = {
        **settings.SBERT,
        "SEARCH": {"FUSION": {"RRF_K": 7}, "KEYWORD": {"MAX_DF": 0.5}},
    }
    fusion = FusionConfig(candidates=3).resolved()
    # METHOD and the weights from the declaration's defaults (linear fusion, 0.4 / 0.6).
    assert (fusion.method, fusion.rrf_k, fusion.candidates) == ("linear", 7, 3)
    assert (fusion.vector_weight, fusion.keyword_weight) == (0.4, 0.6)
    assert KeywordConfig().resolved().max_df == 0.5
    with pytest.raises(ValueError, match=r"SBERT\['SEARCH'\]\['FUSION'\]\['CANDIDATES'\]"):
        FusionConfig(candidates=0).resolved()
