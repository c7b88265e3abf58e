"""Vector, keyword and hybrid figures on an eval split, and the fusion chosen per version."""

from __future__ import annotations

import pytest

from django_sbert import serving
from django_sbert.conf import SEARCH_DEFAULTS
from django_sbert.finetuning import runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.gate import eval_metrics, gate
from django_sbert.finetuning.hybrid import (
    ALPHAS,
    fuse,
    fusion_grid,
    hybrid_metrics,
    keyword_rankings,
    site_fusion,
)
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, VersionStatus
from django_sbert.serving.versions import stored_fusion

TOPICS = [
    ("central bank raises interest rates", "the bank lifted its rate to fight inflation"),
    ("football team wins the cup", "the club took the trophy after a late goal"),
    ("new phone has a better camera", "the handset ships with an improved lens"),
    ("storm closes schools", "heavy rain and wind shut classrooms across the region"),
    ("zebra crossing repainted", "the zebra stripes on the road were painted white again"),
    ("guitar concert sold out", "every ticket for the guitar concert went in an hour"),
]


def test_fuse_is_hybrid_searchs_weighted_reciprocal_rank_sum():
    vector = [("a", 0.9), ("b", 0.8), ("c", 0.1)]
    keyword = [("c", 3.0), ("d", 0.5)]
    # a: 1/(1+1) = .5; b: 1/3; c: 1/4 + 2/(1+1) = 1.25; d: 2/3
    assert fuse(vector, keyword, rrf_k=1, vector_weight=1, keyword_weight=2) == [
        "c",
        "d",
        "a",
        "b",
    ]
    # Keyword weight 0: the vector ranking, the keyword-only rows after it.
    top = fuse(vector, keyword, rrf_k=60, vector_weight=1, keyword_weight=0)[:3]
    assert top == ["a", "b", "c"]


def test_linear_fuse_sums_the_normalised_scores():
    vector = [("a", 0.9), ("b", 0.8), ("c", 0.1)]  # min-max: a 1, b .875, c 0
    keyword = [("c", 3.0), ("d", 0.5)]  # over the best: c 1, d 1/6
    # alpha .5: a .5, b .4375, c .5, d 1/12; a and c tie: the smaller id first.
    linear = {"fusion": "linear", "rrf_k": 60}
    assert fuse(vector, keyword, vector_weight=0.5, keyword_weight=0.5, **linear) == [
        "a",
        "c",
        "b",
        "d",
    ]
    # Unlike rank fusion, the margins count. b is far ahead of a on the vector side, a just
    # ahead of b on the keyword side: linear fusion keeps b first, rank fusion (each first
    # once, second once) lets the heavier keyword side decide.
    far = [("b", 0.9), ("a", 0.5), ("c", 0.1)]
    words = [("a", 1.0), ("b", 0.95)]
    assert fuse(far, words, vector_weight=0.5, keyword_weight=0.55, **linear)[:2] == ["b", "a"]
    assert fuse(far, words, rrf_k=60, vector_weight=0.5, keyword_weight=0.55)[:2] == ["a", "b"]
    # Equally near candidates all get 1; a best keyword score of 0 adds nothing.
    flat = fuse([("a", 0.5), ("b", 0.5)], [("c", 0.0)], vector_weight=1, keyword_weight=1, **linear)
    assert flat == ["a", "b", "c"]


def test_the_grid_tries_the_sites_fusion_first_then_both_kinds():
    grid = fusion_grid(site_fusion())
    rrf_k = float(SEARCH_DEFAULTS["FUSION"]["RRF_K"])
    site = {"fusion": "rrf", "rrf_k": rrf_k, "vector_weight": 1.0, "keyword_weight": 1.0}
    assert grid[0] == site
    assert {**site, "keyword_weight": 0.0} in grid  # vector search alone, in rank order
    linear = [g for g in grid if g["fusion"] == "linear"]
    assert [g["vector_weight"] for g in linear] == list(ALPHAS)
    assert all(g["vector_weight"] + g["keyword_weight"] == pytest.approx(1) for g in linear)
    assert len(grid) == len({tuple(sorted(g.items())) for g in grid})  # no repeats


def test_keyword_rankings_come_from_postgresql_full_text_search(db):
    corpus = {
        "zebra": "The zebra stripes on the road were painted again.",
        "road": "The road was closed; the road was repaired; the road opened.",
        "cat": "A cat sleeps.",
    }
    queries = {"q1": "zebra road", "q2": "cats", "q3": "nothing matches here"}
    ranked = keyword_rankings(queries, corpus, 10)
    # "zebra" is in one document of three, "road" in two: the rare word decides (idf), and
    # only documents that hold one of the rarest words are ranked at all.
    assert ranked["q1"][0][0] == "zebra"
    assert [doc for doc, _ in ranked["q2"]] == ["cat"]  # stemmed: "cats" matches "cat"
    assert ranked["q3"] == []
    scores = [score for _, score in ranked["q1"]]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    every = keyword_rankings({"q": "road stripes"}, corpus, 10, match="all")
    assert [doc for doc, _ in every["q"]] == ["zebra"]  # both words: only one document has them


def test_hybrid_metrics_never_choose_a_fusion_worse_than_vector_or_the_sites(db, tiny_encoder):
    pairs = [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    figures = hybrid_metrics(tiny_encoder, pairs)
    vector = eval_metrics(tiny_encoder, pairs)["ndcg@10"]
    assert set(figures) >= {
        "keyword_ndcg@10",
        "hybrid_ndcg@10",
        "tuned_ndcg@10",
        "fusion_method",
        "fusion_rrf_k",
        "fusion_vector_weight",
        "fusion_keyword_weight",
    }
    assert figures["tuned_ndcg@10"] >= figures["hybrid_ndcg@10"]
    assert figures["tuned_ndcg@10"] >= vector - 1e-9
    values = [figures[f"fusion_{k}"] for k in serving.FUSION_KEYS]
    fusion = stored_fusion(values, figures["fusion_method"])
    assert fusion is not None and fusion in {
        (g["rrf_k"], g["vector_weight"], g["keyword_weight"], g["fusion"])
        for g in fusion_grid(site_fusion())
    }
    assert stored_fusion(values) == (*fusion[:3], "rrf")  # stored before fusion_method: rrf
    assert stored_fusion(values, "borda") is None  # an unknown kind: the settings apply
    # Scored or labelled pairs only: nothing to rank.
    assert hybrid_metrics(tiny_encoder, [TrainingPair(text_a="a", text_b="b", score=0.5)]) == {}


def test_a_run_stores_its_versions_fusion_and_serving_reads_it_once_active(db, model_dir):
    TrainingPair.objects.bulk_create(
        [TrainingPair(text_a=a, text_b=b, split="train") for a, b in TOPICS]
        + [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    )
    run = runs.create_run(
        "default",
        list(TrainingPair.objects.values_list("pk", flat=True)),
        hyperparameters=Hyperparameters(loss="mnrl", batch_size=4),
        enqueue=False,
    )
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    candidate = EncoderVersion.objects.get(run=run)
    for metrics in (run.metrics_before, run.metrics_after, candidate.metrics):
        assert {"ndcg@10", "keyword_ndcg@10", "hybrid_ndcg@10", "tuned_ndcg@10"} <= set(metrics)
    chosen = (
        *(candidate.metrics[f"fusion_{k}"] for k in serving.FUSION_KEYS),
        candidate.metrics["fusion_method"],
    )
    assert gate(candidate).metric == "ndcg@10"  # the gate still compares vector search
    # the candidate is not serving
    assert serving.serving_record("default", max_age=0).fusion is None
    EncoderVersion.objects.filter(pk=candidate.pk).update(status=VersionStatus.ACTIVE)
    current = serving.serving_record("default", max_age=0)
    assert current.version == candidate.version and current.fusion == chosen
    assert current.fusion_settings() == {
        "fusion": chosen[3],
        **dict(zip(serving.FUSION_KEYS, chosen[:3], strict=True)),
    }


def test_hybrid_metrics_rank_texts_too_long_for_an_index_key(db, tiny_encoder):
    # A SciFact abstract among the distractors once exceeded the btree entry limit (2,704
    # bytes) of the temporary table's key; texts are not its key.
    import hashlib

    words = [hashlib.sha256(str(i).encode()).hexdigest()[:12] for i in range(600)]
    long_text = "zebra " + " ".join(words)
    pairs = [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    figures = hybrid_metrics(tiny_encoder, pairs, distractors=[long_text])
    assert 0 <= figures["keyword_ndcg@10"] <= 1
