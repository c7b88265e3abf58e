"""Vector, keyword and hybrid figures on an eval split, and the fusion chosen per version."""

from __future__ import annotations

import hashlib

import pytest

from django_sbert import serving
from django_sbert.conf import SEARCH_DEFAULTS
from django_sbert.finetuning import runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.gate import gate
from django_sbert.finetuning.hybrid import (
    ALPHAS,
    MIN_HELD_OUT,
    choose_fusion,
    fuse,
    fusion_grid,
    hybrid_metrics,
    keyword_rankings,
    site_fusion,
    split_queries,
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


# Written for rank fusion (tests/conftest.py, RANK_FUSION).
pytestmark = pytest.mark.usefixtures("rank_fusion")


def word(i: int) -> str:
    """A made-up word of letters, one per ``i``: a lexeme no other pair holds."""
    digest = hashlib.sha256(f"word {i}".encode()).hexdigest()
    return "".join(chr(ord("a") + int(c, 16)) for c in digest[:9])


def keyword_only_pairs(n: int) -> tuple[list[TrainingPair], list[str]]:
    """``n`` eval pairs only the keyword side finds, and the distractors that make it so.

    Each query and its text share one made-up word, which no other text holds: BM25 ranks the
    text first. The text is long with other made-up words and the distractors are short and
    shaped like the queries ("<word> notice"), so the tiny model's vectors put the text far
    down; the settings' rank fusion ties a distractor with it and keyword-heavier fusion
    does not."""
    pairs = [
        TrainingPair(
            text_a=f"{word(i)} notice",
            text_b=f"the {word(i)} " + " ".join(word(10000 + 40 * i + j) for j in range(30)),
            split="eval",
        )
        for i in range(n)
    ]
    return pairs, [f"{word(20000 + j)} notice" for j in range(150)]


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


def test_split_queries_puts_each_query_on_a_fixed_side_whatever_else_the_set_holds():
    ids = [f"q{i}" for i in range(200)]
    tuning, held = split_queries(ids)
    assert set(tuning) | set(held) == set(ids) and not set(tuning) & set(held)
    assert 70 <= len(tuning) <= 130  # about TUNE_SHARE
    more_tuning, more_held = split_queries([*ids, *(f"new {i}" for i in range(50))])
    assert set(tuning) <= set(more_tuning) and set(held) <= set(more_held)
    assert split_queries(list(reversed(ids))) == (tuning, held)  # order does not matter


def _lists(ids, keyword_right):
    """Candidate lists for ``ids``, the relevant row "r-<q>". Where ``keyword_right(q)``: the
    keyword side finds it first, the vector side not at all; elsewhere the vector side finds
    it first and the keyword side ranks two wrong rows."""
    vector, keyword = {}, {}
    for q in ids:
        if keyword_right(q):
            vector[q] = [(f"a-{q}", 0.9), (f"b-{q}", 0.8), (f"c-{q}", 0.1)]
            keyword[q] = [(f"r-{q}", 5.0)]
        else:
            vector[q] = [(f"r-{q}", 0.9), (f"a-{q}", 0.8), (f"b-{q}", 0.1)]
            keyword[q] = [(f"k-{q}", 5.0), (f"a-{q}", 4.0)]
    relevant = {q: {f"r-{q}": 1} for q in ids}
    return vector, keyword, relevant


def test_the_tuned_fusion_is_used_only_where_it_wins_on_queries_it_was_not_tuned_on():
    ids = [f"q{i}" for i in range(4 * MIN_HELD_OUT)]
    tuning, held = split_queries(ids)
    default = site_fusion()
    # The keyword side is right on every query: a keyword-heavy fusion wins on both parts.
    choice = choose_fusion(*_lists(ids, lambda q: True), default)
    assert choice["candidate"] != default and choice["used"] is True
    assert choice["heldout_candidate"] > choice["heldout_current"]
    assert (choice["tuned_on"], choice["heldout_queries"]) == (len(tuning), len(held))
    # Right only on the tuning part: the same kind of fusion is chosen there, and does no
    # better on the queries it was not chosen on, so the settings' fusion stays.
    choice = choose_fusion(*_lists(ids, lambda q: q in tuning), default)
    assert choice["candidate"] != default and choice["used"] is False
    assert choice["heldout_candidate"] <= choice["heldout_current"]
    # Too few held-out queries to tell: the settings' fusion stays, however the tuning went.
    few = ids[:MIN_HELD_OUT]
    choice = choose_fusion(*_lists(few, lambda q: True), default)
    assert choice["used"] is False and choice["heldout_current"] is None


def test_hybrid_metrics_keep_the_settings_fusion_when_the_split_is_too_small(db, tiny_encoder):
    pairs = [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    figures = hybrid_metrics(tiny_encoder, pairs)
    assert set(figures) >= {
        "keyword_ndcg@10",
        "hybrid_ndcg@10",
        "tuned_ndcg@10",
        "candidate_fusion_method",
        "candidate_fusion_rrf_k",
        "candidate_fusion_vector_weight",
        "candidate_fusion_keyword_weight",
    }
    assert figures["fusion_used"] == 0.0 and figures["heldout_queries"] < MIN_HELD_OUT
    assert "fusion_method" not in figures and "fusion_rrf_k" not in figures
    candidate = stored_fusion(
        [figures[f"candidate_fusion_{k}"] for k in serving.FUSION_KEYS],
        figures["candidate_fusion_method"],
    )
    assert candidate in {
        (g["rrf_k"], g["vector_weight"], g["keyword_weight"], g["fusion"])
        for g in fusion_grid(site_fusion())
    }
    # Scored or labelled pairs only: nothing to rank.
    assert hybrid_metrics(tiny_encoder, [TrainingPair(text_a="a", text_b="b", score=0.5)]) == {}


def test_hybrid_metrics_store_a_fusion_that_won_on_held_out_pairs(db, tiny_encoder):
    # Only the keywords find these pairs: a keyword-heavier fusion, chosen on part of the
    # queries, ranks the others better than the settings'.
    pairs, distractors = keyword_only_pairs(4 * MIN_HELD_OUT)
    figures = hybrid_metrics(tiny_encoder, pairs, distractors=distractors)
    assert figures["keyword_ndcg@10"] == pytest.approx(1.0)
    assert figures["fusion_used"] == 1.0
    assert figures["heldout_tuned_ndcg@10"] > figures["heldout_hybrid_ndcg@10"]
    assert figures["heldout_queries"] + figures["tuned_on_queries"] == 4 * MIN_HELD_OUT
    values = [figures[f"fusion_{k}"] for k in serving.FUSION_KEYS]
    fusion = stored_fusion(values, figures["fusion_method"])
    assert fusion == stored_fusion(
        [figures[f"candidate_fusion_{k}"] for k in serving.FUSION_KEYS],
        figures["candidate_fusion_method"],
    )
    assert fusion != stored_fusion(
        [site_fusion()[k] for k in serving.FUSION_KEYS], site_fusion()["fusion"]
    )
    assert stored_fusion(values) == (*fusion[:3], "rrf")  # stored before fusion_method: rrf
    assert stored_fusion(values, "borda") is None  # an unknown kind: the settings apply


def test_a_run_stores_its_versions_fusion_and_serving_reads_it_once_active(db, model_dir):
    evaluation, distractors = keyword_only_pairs(4 * MIN_HELD_OUT)  # a tuned fusion wins
    TrainingPair.objects.bulk_create(
        [TrainingPair(text_a=a, text_b=b, split="train") for a, b in TOPICS]
        # train positives are the eval split's distractors (gate.eval_distractors)
        + [
            TrainingPair(text_a=f"{word(30000 + i)} report", text_b=text, split="train")
            for i, text in enumerate(distractors)
        ]
        + evaluation
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
    assert candidate.metrics["fusion_used"] == 1.0
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
