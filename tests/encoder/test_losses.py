"""Each loss against values worked out by hand on small tensors (no model involved)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from django_sbert.encoder.data import (
    Example,
    smart_batches,
    unique_text_batches,
    validate_examples,
)
from django_sbert.encoder.losses import (
    CachedMultipleNegativesRankingLoss,
    CoSENTLoss,
    CosineLoss,
    MarginMSELoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
    SimCSELoss,
    SoftmaxLoss,
    TripletLoss,
    build_loss,
)

R2 = 1 / math.sqrt(2)


def t(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_softmax_classifies_u_v_and_their_difference():
    loss = SoftmaxLoss(dimensions=1, num_labels=3)
    with torch.no_grad():
        loss.classifier.weight.copy_(torch.eye(3))
        loss.classifier.bias.zero_()
    # u = 1, v = 3: features (u, v, |u - v|) = (1, 3, 2) are the logits; gold label 1.
    value = loss.compute_loss_from_embeddings([t([1.0]), t([3.0])], torch.tensor([1]))
    expected = math.log(math.e**1 + math.e**3 + math.e**2) - 3
    assert value.item() == pytest.approx(expected, abs=1e-5)


def test_cosine_is_mse_between_cosine_and_score():
    u = t([1.0, 0.0], [1.0, 1.0])
    v = t([0.0, 1.0], [1.0, 0.0])  # cosines 0 and 1/sqrt(2)
    value = CosineLoss().compute_loss_from_embeddings([u, v], torch.tensor([0.5, 1.0]))
    expected = ((0 - 0.5) ** 2 + (R2 - 1.0) ** 2) / 2
    assert value.item() == pytest.approx(expected, abs=1e-6)


def test_cosent_penalises_pairs_ranked_against_their_scores():
    u = t([1.0, 0.0], [1.0, 0.0], [1.0, 0.0])
    v = t([0.0, 1.0], [1.0, 1.0], [1.0, 0.0])  # cosines 0, 1/sqrt(2), 1
    cos = [0.0, R2, 1.0]
    scores = [0.9, 0.5, 0.1]  # the gold order is the reverse of the cosine order
    terms = [
        math.exp(20 * (cos[j] - cos[i]))
        for i in range(3)
        for j in range(3)
        if scores[i] > scores[j]
    ]
    expected = math.log(1 + sum(terms))
    value = CoSENTLoss().compute_loss_from_embeddings([u, v], torch.tensor(scores))
    assert value.item() == pytest.approx(expected, rel=1e-5)


def test_cosent_is_zero_without_ordered_pairs_and_small_when_order_is_right():
    u = t([1.0, 0.0], [1.0, 0.0])
    v = t([0.0, 1.0], [1.0, 0.0])  # cosines 0 and 1
    loss = CoSENTLoss()
    tied = loss.compute_loss_from_embeddings([u, v], torch.tensor([0.3, 0.3]))
    assert tied.item() == pytest.approx(0.0)
    right = loss.compute_loss_from_embeddings([u, v], torch.tensor([0.1, 0.9]))
    assert right.item() == pytest.approx(math.log(1 + math.exp(-20)), abs=1e-7)


def test_triplet_uses_euclidean_distance_and_margin_one():
    a = t([0.0, 0.0], [0.0, 0.0])
    p = t([3.0, 4.0], [1.0, 0.0])  # distances 5 and 1
    n = t([0.0, 1.0], [3.0, 0.0])  # distances 1 and 3
    value = TripletLoss().compute_loss_from_embeddings([a, p, n], None)
    expected = (max(5 - 1 + 1, 0) + max(1 - 3 + 1, 0)) / 2  # = 2.5
    assert value.item() == pytest.approx(expected, abs=1e-4)


def test_margin_mse_regresses_the_cosine_margin_on_the_teachers():
    q = t([1.0, 0.0], [1.0, 0.0])
    a = t([1.0, 0.0], [1.0, 1.0])  # cosines with q: 1 and 1/sqrt(2)
    b = t([0.0, 1.0], [1.0, 0.0])  # cosines with q: 0 and 1
    margins = torch.tensor([0.25, -0.5])  # the teacher's score(a) - score(b)
    value = MarginMSELoss().compute_loss_from_embeddings([q, a, b], margins)
    expected = ((1 - 0 - 0.25) ** 2 + (R2 - 1 + 0.5) ** 2) / 2
    assert value.item() == pytest.approx(expected, abs=1e-6)
    # A student whose margins are the teacher's has nothing left to learn, at any scale.
    assert MarginMSELoss().compute_loss_from_embeddings(
        [3 * q, a, b], torch.tensor([1.0, R2 - 1])
    ).item() == pytest.approx(0.0, abs=1e-7)


def test_margin_mse_with_several_other_passages_averages_every_margin():
    q = t([1.0, 0.0], [1.0, 0.0])
    a = t([1.0, 0.0], [1.0, 1.0])  # cosines with q: 1 and 1/sqrt(2)
    b = t([0.0, 1.0], [1.0, 0.0])  # 0 and 1
    c = t([-1.0, 0.0], [0.0, 1.0])  # -1 and 0
    margins = torch.tensor([[0.25, 1.5], [-0.5, 0.0]])  # row: a - b, a - c
    value = MarginMSELoss().compute_loss_from_embeddings([q, a, b, c], margins)
    student = torch.tensor([[1.0, 2.0], [R2 - 1, R2]])  # cos(q, a) - cos(q, b or c)
    expected = ((student - margins) ** 2).mean().item()
    assert value.item() == pytest.approx(expected, abs=1e-6)
    # The same as two single-margin examples per query: one loss, however the margins come.
    single = [
        MarginMSELoss().compute_loss_from_embeddings([q, a, other], margins[:, i]).item()
        for i, other in enumerate((b, c))
    ]
    assert value.item() == pytest.approx(sum(single) / 2, abs=1e-6)


def _info_nce(cosines: list[list[float]], scale: float = 20.0) -> float:
    """Mean over rows of -log softmax(scale * cosines)[row, row]."""
    total = 0.0
    for i, row in enumerate(cosines):
        total += -scale * row[i] + math.log(sum(math.exp(scale * c) for c in row))
    return total / len(cosines)


def test_mnrl_scores_each_anchor_against_all_positives():
    anchors = t([1.0, 0.0], [0.0, 1.0])
    positives = t([1.0, 0.0], [1.0, 1.0])
    expected = _info_nce([[1.0, R2], [0.0, R2]])
    value = MultipleNegativesRankingLoss().compute_loss_from_embeddings([anchors, positives], None)
    assert value.item() == pytest.approx(expected, rel=1e-5)


def test_mnrl_adds_hard_negatives_as_extra_candidates():
    anchors = t([1.0, 0.0], [0.0, 1.0])
    positives = t([1.0, 0.0], [1.0, 1.0])
    negatives = t([0.0, 1.0], [-1.0, 0.0])
    # Candidates: p1, p2, n1, n2.
    expected = _info_nce([[1.0, R2, 0.0, -1.0], [0.0, R2, 1.0, 0.0]])
    loss = MultipleNegativesRankingLoss()
    value = loss.compute_loss_from_embeddings([anchors, positives, negatives], None)
    assert value.item() == pytest.approx(expected, rel=1e-5)


def test_mnrl_takes_several_hard_negatives_per_anchor():
    anchors = t([1.0, 0.0], [0.0, 1.0])
    positives = t([1.0, 0.0], [1.0, 1.0])
    first = t([0.0, 1.0], [-1.0, 0.0])
    second = t([-1.0, 0.0], [0.0, -1.0])
    # Candidates: p1, p2, the first negatives n1 n2, then the second ones m1 m2.
    expected = _info_nce([[1.0, R2, 0.0, -1.0, -1.0, 0.0], [0.0, R2, 1.0, 0.0, 0.0, -1.0]])
    loss = MultipleNegativesRankingLoss()
    value = loss.compute_loss_from_embeddings([anchors, positives, first, second], None)
    assert value.item() == pytest.approx(expected, rel=1e-5)
    four = validate_examples([("a", "p", "n1", "n2")], loss)
    assert four == [Example(("a", "p", "n1", "n2"))]
    with pytest.raises(ValueError, match="item 0 has 19 items"):
        validate_examples([("a", "p", *[f"n{i}" for i in range(17)])], loss)


def test_simcse_embeds_the_same_texts_twice_and_contrasts_the_views():
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> torch.Tensor:
        calls.append(texts)
        # Rows x, y (first view) and x, y (second view, another dropout mask).
        return t([1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0])

    value = SimCSELoss()(embed, [["x", "y"]], None)
    assert calls == [["x", "y", "x", "y"]]  # one forward pass, every text twice
    # Row x: cos(x1, x2) = 1/sqrt(2), cos(x1, y2) = 0; row y: cos(y1, x2) = 1/sqrt(2), cos = 1.
    assert value.item() == pytest.approx(_info_nce([[R2, 0.0], [R2, 1.0]]), rel=1e-5)


def test_matryoshka_sums_the_inner_loss_over_truncated_prefixes():
    u = t([1.0, 0.0, 0.0], [1.0, 1.0, 0.0])
    v = t([1.0, 1.0, 1.0], [1.0, -1.0, 5.0])
    labels = torch.tensor([1.0, 0.0])
    loss = MatryoshkaLoss(CosineLoss(), dims=(3, 2, 1), weights=(1.0, 1.0, 0.5))
    # Cosines by hand: full (1/sqrt3, 0), first two dims (1/sqrt2, 0), first dim (1, 1).
    full = ((1 / math.sqrt(3) - 1) ** 2 + 0**2) / 2
    two = ((R2 - 1) ** 2 + 0**2) / 2
    one = ((1 - 1) ** 2 + (1 - 0) ** 2) / 2
    value = loss.compute_loss_from_embeddings([u, v], labels)
    assert value.item() == pytest.approx(full + two + 0.5 * one, rel=1e-5)


def test_columns_of_alike_length_share_one_forward_pass():
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> torch.Tensor:
        calls.append(texts)
        return torch.ones(len(texts), 2)

    CosineLoss()(embed, [["a cat", "a dog"], ["the cat", "dogs"]], torch.tensor([1.0, 0.0]))
    assert calls == [["a cat", "a dog", "the cat", "dogs"]]
    calls.clear()
    query, passage = "short query", "a long passage " * 20
    MultipleNegativesRankingLoss()(embed, [[query, query], [passage, passage]], None)
    assert calls == [[query, query], [passage, passage]]  # no padding queries to passages


def test_losses_are_differentiable():
    u = torch.randn(4, 8, requires_grad=True)
    v = torch.randn(4, 8, requires_grad=True)
    for loss in (CosineLoss(), CoSENTLoss(), MultipleNegativesRankingLoss()):
        u.grad = None
        loss.compute_loss_from_embeddings([u, v], torch.tensor([0.1, 0.4, 0.2, 0.9])).backward()
        assert u.grad is not None and torch.isfinite(u.grad).all()


def test_build_loss_by_name_and_options():
    assert isinstance(build_loss("cosent", 32, scale=10.0), CoSENTLoss)
    softmax = build_loss("softmax", 32, num_labels=2)
    assert softmax.classifier.in_features == 96
    nested = build_loss("matryoshka", 384, inner="cosine")
    assert nested.dims == (384, 256, 128, 64) and isinstance(nested.inner, CosineLoss)
    assert nested.label_kind == "float"


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("cosinus", {}, "Unknown loss 'cosinus'; choose one of"),
        ("matryoshka", {"dims": [64, 512]}, "exceed the encoder's 384 dimensions"),
        ("matryoshka", {"inner": "softmax"}, "cannot wrap 'softmax'"),
        ("mnrl", {"temperature": 0.05}, "Bad loss_options for 'mnrl'"),
    ],
)
def test_build_loss_errors_say_what_to_do(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_loss(name, 384, **options)


def test_validate_examples_normalises_shapes():
    pairs = validate_examples([("a", "b", 0.5), ["c", "d", 1]], CosineLoss())
    assert pairs == [Example(("a", "b"), 0.5), Example(("c", "d"), 1.0)]
    numpy_label = validate_examples([("a", "b", np.float32(0.25))], CosineLoss())
    assert numpy_label[0].label == 0.25 and type(numpy_label[0].label) is float
    assert validate_examples(["x", ("y",)], SimCSELoss()) == [Example(("x",)), Example(("y",))]


@pytest.mark.parametrize(
    ("loss", "examples", "message"),
    [
        (CosineLoss(), [("a", "b")], r"expects examples shaped \(sentence_a, sentence_b, score\)"),
        (CosineLoss(), [("a", "b", 4.0)], "divided by 5"),
        (CosineLoss(), [("a", "b", "high")], "not a number"),
        (SoftmaxLoss(8), [("a", "b", 3)], "label 3"),
        (TripletLoss(), [("a", "p")], r"\(anchor, positive, negative\); item 0 has 2 items"),
        (MultipleNegativesRankingLoss(), [("a", "p"), ("b", "p", "n")], "same number of texts"),
        (MultipleNegativesRankingLoss(), [("a", "")], "empty text"),
        (MultipleNegativesRankingLoss(), [], "No examples given"),
        (SimCSELoss(), [42], "not a tuple"),
        (MarginMSELoss(), [("q", "a", "b")], r"\(query, passage_a, passage_b, margin\)"),
        (MarginMSELoss(), [("q", "a", "b", "wide")], "not a number"),
        (MarginMSELoss(), [("q", "a", "b", "c", [0.1])], r"1 margin\(s\) for 2 other passage"),
        (MarginMSELoss(), [("q", "a", "b", 0.2), ("q", "a", "b", "c", [0.1, 0.2])], "same number"),
    ],
)
def test_validate_examples_rejects_wrong_shapes(loss, examples, message):
    with pytest.raises(ValueError, match=message):
        validate_examples(examples, loss)


def test_smart_batches_group_similar_lengths_and_keep_every_example():
    examples = [Example(("x" * n, "y")) for n in range(1, 101)]
    batches = smart_batches(examples, 10, random.Random(0))
    assert sorted(e.texts[0] for b in batches for e in b) == sorted(e.texts[0] for e in examples)
    # One mega-batch holds everything, so each batch covers a run of ten lengths.
    assert all(
        max(len(e.texts[0]) for e in b) - min(len(e.texts[0]) for e in b) == 9 for b in batches
    )


def test_unique_text_batches_never_repeat_a_text_in_a_batch():
    # Ten queries share five passages: a naive batcher would put duplicates together.
    examples = [Example((f"q{i}", f"doc{i % 5}")) for i in range(10)]
    batches = unique_text_batches(examples, 8, random.Random(0))
    for batch in batches:
        texts = [text for e in batch for text in e.texts]
        assert len(texts) == len(set(texts)) and len(batch) <= 5
    assert sum(len(b) for b in batches) == 10


def test_losses_that_compare_examples_get_random_batches():
    from django_sbert.encoder.training import plan_batches

    lengths = range(1, 161)
    spreads = {}
    for name in ("cosine", "cosent"):
        loss = build_loss(name, 8)
        data = validate_examples([("x" * n, "y", 0.5) for n in lengths], loss)
        batches = plan_batches(data, loss, 1, 16, random.Random(0))
        spreads[name] = max(
            max(len(e.texts[0]) for e in b) - min(len(e.texts[0]) for e in b) for _, b in batches
        )
    # cosine: length-sorted batches (little padding); cosent ranks the pairs of a batch against
    # each other, so its batches must mix lengths as a random sample does.
    assert spreads["cosine"] == 15 and spreads["cosent"] > 100


def _cached_vs_plain_grads(encoder, columns, mini_batch_size, **options):
    """Loss and parameter gradients of plain and cached mnrl on one batch of ``encoder``."""

    def embed(texts):
        return encoder(encoder.tokenize(texts))

    results = []
    for loss in (
        MultipleNegativesRankingLoss(**options),
        CachedMultipleNegativesRankingLoss(mini_batch_size=mini_batch_size, **options),
    ):
        encoder.zero_grad(set_to_none=True)
        torch.manual_seed(11)
        value = loss(embed, columns, None)
        value.backward()
        grads = {
            n: p.grad.detach().clone() for n, p in encoder.named_parameters() if p.grad is not None
        }
        results.append((value.item(), grads))
    return results


@pytest.mark.parametrize(
    ("negatives", "options"),
    [
        (0, {}),
        (1, {}),
        (2, {}),
        (1, {"directions": ["query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"]}),
        (1, {"hardness_mode": "all_negatives", "hardness_strength": 5.0}),
    ],
)
def test_cached_mnrl_gives_the_loss_and_gradients_of_plain_mnrl(tiny_model_dir, negatives, options):
    from django_sbert.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(tiny_model_dir)
    encoder.eval()  # no dropout: both must see the same forward pass
    anchors = [
        "bank rate",
        "cat dog",
        "vote party",
        "food price",
        "guitar music",
        "car fast",
        "market money",
    ]
    positives = [
        "interest money",
        "dogs child",
        "minister president",
        "eats prices",
        "playing plays",
        "cars slow",
        "rate bank",
    ]
    columns = [anchors, positives]
    negative_texts = ["cat", "bank", "food", "car", "vote", "music", "election"]
    for n in range(negatives):
        columns.append([f"{text} {'again ' * n}".strip() for text in negative_texts])
    (plain_loss, plain), (cached_loss, cached) = _cached_vs_plain_grads(
        encoder, columns, 3, **options
    )
    assert cached_loss == pytest.approx(plain_loss, abs=1e-5)
    assert plain.keys() == cached.keys() and len(plain) > 10
    for name in plain:
        assert torch.allclose(cached[name], plain[name], atol=1e-5, rtol=1e-4), name
    assert any(g.abs().sum() > 0 for g in cached.values())


def test_cached_mnrl_replays_the_dropout_of_its_first_pass(tiny_model_dir):
    """In train mode each chunk's second forward pass must draw the dropout masks of the
    first: the gradient is then that of the loss it returned. Checked against plain mnrl
    computed chunk by chunk under the same random states."""
    from django_sbert.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(tiny_model_dir)
    encoder.train()
    columns = [
        ["bank rate", "cat dog", "vote party", "food price"],
        ["money", "dogs", "minister", "eats"],
    ]

    def embed(texts):
        return encoder(encoder.tokenize(texts))

    torch.manual_seed(5)
    cached = CachedMultipleNegativesRankingLoss(mini_batch_size=2)
    value = cached(embed, columns, None)
    value.backward()
    got = {n: p.grad.detach().clone() for n, p in encoder.named_parameters() if p.grad is not None}
    after = torch.randn(3)

    # The reference: the same chunked forward passes, with the graph kept.
    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    parts = [embed(column[i : i + 2]) for column in columns for i in (0, 2)]
    reps = [torch.cat(parts[:2]), torch.cat(parts[2:])]
    reference = MultipleNegativesRankingLoss().compute_loss_from_embeddings(reps, None)
    reference.backward()
    want = {n: p.grad.detach().clone() for n, p in encoder.named_parameters() if p.grad is not None}
    assert value.item() == pytest.approx(reference.item(), abs=1e-5)
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-5, rtol=1e-4), name
    # The random stream goes on as if the chunks had run once.
    torch.manual_seed(5)
    with torch.no_grad():
        for column in columns:
            for i in (0, 2):
                embed(column[i : i + 2])
    assert torch.equal(after, torch.randn(3))


def test_cached_mnrl_trains_end_to_end_and_checks_its_chunk_size(tiny_model_dir):
    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.training import fit

    with pytest.raises(ValueError, match="mini_batch_size must be a whole number >= 1"):
        build_loss("cached_mnrl", 32, mini_batch_size=0)
    encoder = SentenceEncoder.load(tiny_model_dir)
    pairs = [(f"bank rate {i}", f"money market {i}") for i in range(12)]
    result = fit(
        encoder, pairs, loss="cached_mnrl", batch_size=12, loss_options={"mini_batch_size": 4}
    )
    assert result.steps == 1 and result.loss == {
        "name": "cached_mnrl",
        "scale": 20.0,
        "mini_batch_size": 4,
    }
    assert np.isfinite(result.loss_history[0]["loss"])


IN_BATCH_VARIANTS = [
    {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "per_direction"},
    {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "joint"},
    {"directions": ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")},
    {"directions": ("query_to_doc", "doc_to_doc")},
    {"hardness_mode": "in_batch_negatives", "hardness_strength": 9.0},
    {"hardness_mode": "hard_negatives", "hardness_strength": 5.0},
    {
        "hardness_mode": "all_negatives",
        "hardness_strength": 5.0,
        "directions": ["query_to_doc", "doc_to_query"],
    },
]


@pytest.mark.parametrize("negatives", [0, 1, 2])
@pytest.mark.parametrize("options", IN_BATCH_VARIANTS)
def test_mnrl_variants_equal_sentence_transformers(options, negatives):
    """Directions, partitions and hardness weighting: sentence-transformers' loss, value and
    gradients, on the same tensors."""
    from sentence_transformers.sentence_transformer.losses import (
        MultipleNegativesRankingLoss as Peer,
    )

    generator = torch.Generator().manual_seed(negatives)
    columns = [torch.randn(5, 8, generator=generator) for _ in range(2 + negatives)]
    ours_in = [c.clone().requires_grad_() for c in columns]
    peer_in = [c.clone().requires_grad_() for c in columns]
    ours = MultipleNegativesRankingLoss(**options).compute_loss_from_embeddings(ours_in, None)
    peer_options = {k: tuple(v) if k == "directions" else v for k, v in options.items()}
    peer = Peer(None, **peer_options).compute_loss_from_embeddings(peer_in, None)
    assert ours.item() == pytest.approx(peer.item(), abs=1e-5)
    ours.backward()
    peer.backward()
    for mine, theirs in zip(ours_in, peer_in, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-6, rtol=1e-5)


def test_mnrl_defaults_are_plain_info_nce_and_the_variants_change_the_loss():
    generator = torch.Generator().manual_seed(0)
    anchors = torch.randn(4, 6, generator=generator)
    # Positives near their anchors, hard negatives a little further: a loss worth weighting.
    positives = anchors + 0.3 * torch.randn(4, 6, generator=generator)
    negatives = anchors + 0.6 * torch.randn(4, 6, generator=generator)
    columns = [anchors, positives, negatives]
    plain = MultipleNegativesRankingLoss().compute_loss_from_embeddings(columns, None)
    cosines = (
        torch.nn.functional.normalize(columns[0], dim=-1)
        @ torch.nn.functional.normalize(torch.cat(columns[1:]), dim=-1).T
    )
    assert plain.item() == pytest.approx(_info_nce(cosines.tolist()), rel=1e-5)
    for options in IN_BATCH_VARIANTS:
        varied = MultipleNegativesRankingLoss(**options).compute_loss_from_embeddings(columns, None)
        assert abs(varied.item() - plain.item()) > 1e-3, options


def test_symmetric_mnrl_adds_the_positive_choosing_its_anchor():
    anchors = t([1.0, 0.0], [0.0, 1.0])
    positives = t([1.0, 0.0], [1.0, 1.0])
    forward = _info_nce([[1.0, R2], [0.0, R2]])  # each anchor among the positives
    backward = _info_nce([[1.0, 0.0], [R2, R2]])  # each positive among the anchors
    loss = MultipleNegativesRankingLoss(
        directions=["query_to_doc", "doc_to_query"], partition_mode="per_direction"
    )
    value = loss.compute_loss_from_embeddings([anchors, positives], None)
    # per_direction averages the two partition functions, so the loss is the two's mean.
    assert value.item() == pytest.approx((forward + backward) / 2, rel=1e-5)
    assert loss.config() == {
        "name": "mnrl",
        "scale": 20.0,
        "directions": ["query_to_doc", "doc_to_query"],
        "partition_mode": "per_direction",
    }
    assert MultipleNegativesRankingLoss().config() == {"name": "mnrl", "scale": 20.0}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"directions": "doc_to_query"}, "directions must be a list of names"),
        ({"directions": ["doc_to_query"]}, "must include 'query_to_doc'"),
        ({"directions": ["query_to_doc", "doc_to_docs"]}, r"Unknown directions \['doc_to_docs'\]"),
        ({"partition_mode": "each"}, "partition_mode must be 'joint' or 'per_direction'"),
        (
            {"directions": ["query_to_doc", "doc_to_doc"], "partition_mode": "per_direction"},
            "use partition_mode 'joint'",
        ),
        ({"hardness_mode": "hardest"}, "hardness_mode must be one of"),
        ({"hardness_mode": "hard_negatives"}, "does nothing at hardness_strength 0"),
        ({"hardness_strength": 5.0}, "needs a hardness_mode"),
        ({"hardness_mode": "hard_negatives", "hardness_strength": -1}, "a number >= 0"),
    ],
)
def test_mnrl_option_errors_say_what_to_do(options, message):
    with pytest.raises(ValueError, match=message):
        build_loss("mnrl", 384, **options)
    with pytest.raises(ValueError, match=message):
        build_loss("cached_mnrl", 384, **options)
