"""Hard-negative mining: the best-ranked text that is neither a positive nor too close to one."""

from __future__ import annotations

import pytest

from django_sbert.encoder.mining import mine_hard_negatives
from tests.encoder.test_metrics import TableEncoder, angle


def table() -> TableEncoder:
    # Angles from the query "q": cos 0 deg = 1.0, cos 10 = 0.985, cos 20 = 0.94, cos 30 = 0.87.
    return TableEncoder(
        {
            "q": angle(0),
            "pos": angle(20),  # the labelled positive: cos 0.940
            "other pos": angle(5),  # a second positive of "q": never a negative
            "near duplicate": angle(19),  # cos 0.946 >= 0.95 * 0.940: presumed relevant
            "hard": angle(30),  # cos 0.866: the hard negative
            "easy": angle(80),
            "q2": angle(90),
            "pos2": angle(85),
        }
    )


def test_negative_is_the_best_candidate_below_the_positive_aware_ceiling():
    corpus = ["pos", "other pos", "near duplicate", "hard", "easy", "pos2"]
    pairs = [("q", "pos"), ("q", "other pos"), ("q2", "pos2")]
    triples = mine_hard_negatives(table(), pairs, corpus)
    by_pair = {(a, p): n for a, p, n in triples}
    assert by_pair == {
        # Ceiling 0.95 * 0.940 = 0.893: "near duplicate" (0.946) is skipped, "hard" (0.866) not.
        ("q", "pos"): "hard",
        # Ceiling 0.95 * 0.996 = 0.946: "near duplicate" (0.9455) is just below it.
        ("q", "other pos"): "near duplicate",
        # "easy" (cos 10 deg from q2 = 0.985) is too close to pos2 (0.996): presumed relevant.
        ("q2", "pos2"): "hard",
    }
    # When the top_k candidates are all positives or too close, the pair is left out.
    assert mine_hard_negatives(table(), [("q2", "pos2")], corpus, top_k=2) == []


def test_without_top_k_a_pair_looks_past_the_first_window(monkeypatch):
    """By default (``top_k=None``) FIRST_LOOK texts are ranked for every anchor, and the whole
    corpus for a pair that finds nothing there: the pair the model ranks worst is kept."""
    from django_sbert.encoder import mining

    corpus = ["pos", "other pos", "near duplicate", "hard", "easy", "pos2"]
    monkeypatch.setattr(mining, "FIRST_LOOK", 2)
    # q2's two best texts are pos2 (its positive) and "easy" (presumed relevant).
    assert mine_hard_negatives(table(), [("q2", "pos2")], corpus, top_k=2) == []
    assert mine_hard_negatives(table(), [("q2", "pos2")], corpus) == [("q2", "pos2", "hard")]
    # From q2 (90 deg): hard cos 0.50, pos 0.34, near duplicate 0.33, in that order.
    assert mine_hard_negatives(table(), [("q2", "pos2")], corpus, top_k=None, negatives=3) == [
        ("q2", "pos2", "hard", "pos", "near duplicate")
    ]


def test_several_negatives_are_the_best_candidates_in_rank_order():
    corpus = ["pos", "other pos", "near duplicate", "hard", "easy"]
    # "near duplicate" stays presumed relevant: the two below the ceiling, best first.
    assert mine_hard_negatives(table(), [("q", "pos")], corpus, negatives=2) == [
        ("q", "pos", "hard", "easy")
    ]
    # A pair with fewer candidates left than asked for (two here) is left out, not padded.
    assert mine_hard_negatives(table(), [("q", "pos")], corpus, negatives=3) == []
    with pytest.raises(ValueError, match="negatives"):
        mine_hard_negatives(table(), [("q", "pos")], corpus, negatives=0)


def test_a_text_that_contains_the_positive_is_never_its_negative():
    """The article a headline -> lead pair was cut from holds the lead: relevant, whatever
    its score (here below the ceiling, where a plain text would be the negative)."""
    encoder = table()
    article = "Headline\npos\nMore paragraphs follow."
    encoder.table[article] = angle(30)  # cos 0.866 < ceiling 0.893
    encoder.table["another"] = angle(35)
    triples = mine_hard_negatives(encoder, [("q", "pos")], [article, "pos", "another"])
    assert triples == [("q", "pos", "another")]


def test_given_corpus_vectors_replace_encoding_the_corpus():
    import numpy as np

    encoder = table()
    encoder.table["not in corpus"] = angle(25)  # a positive the corpus lacks: encoded
    corpus = ["pos", "other pos", "near duplicate", "hard", "hard", "easy", "pos2"]
    pairs = [("q", "pos"), ("q", "other pos"), ("q2", "pos2"), ("q", "not in corpus")]
    vectors = np.asarray(encoder.encode(corpus, normalize=True))
    assert mine_hard_negatives(encoder, pairs, corpus, corpus_vectors=vectors) == (
        mine_hard_negatives(encoder, pairs, corpus)
    )
    # The stored vectors are what ranks the corpus: swap two and the negative follows them.
    swapped = vectors.copy()
    swapped[[3, 5]] = vectors[[5, 3]]
    swapped[4] = vectors[5]
    triples = mine_hard_negatives(encoder, [("q", "pos")], corpus, corpus_vectors=swapped)
    assert triples == [("q", "pos", "easy")]
    with pytest.raises(ValueError, match="one vector per corpus text"):
        mine_hard_negatives(encoder, pairs, corpus, corpus_vectors=vectors[:3])


def test_bad_settings_and_empty_input():
    with pytest.raises(ValueError, match="max_ratio"):
        mine_hard_negatives(table(), [("q", "pos")], ["hard"], max_ratio=0)
    with pytest.raises(ValueError, match="top_k"):
        mine_hard_negatives(table(), [("q", "pos")], ["hard"], top_k=0)
    assert mine_hard_negatives(table(), [], ["hard"]) == []
    assert mine_hard_negatives(table(), [("q", "pos")], ["pos"]) == []  # only the positive


@pytest.mark.slow
def test_minilm_picks_the_related_text_that_answers_something_else(minilm):
    corpus = [
        "Vaccines train the immune system to recognise a pathogen without causing disease.",
        "Vaccines train the immune system to recognize a pathogen without causing the disease.",
        "Antibiotics kill bacteria but have no effect on viruses such as influenza.",
        "The stock market fell sharply after the central bank raised interest rates.",
        "A recipe for sourdough bread needs flour, water, salt and a starter.",
    ]
    pairs = [("How do vaccines protect against disease?", corpus[0])]
    ((_, _, negative),) = mine_hard_negatives(minilm, pairs, corpus)
    assert negative == corpus[2]  # the near-copy of the positive is skipped as relevant
