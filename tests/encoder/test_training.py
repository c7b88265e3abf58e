"""fit() on the tiny random BERT: it learns, it is reproducible, it refuses bad input early,
it can be cancelled, and what it returns saves in the sentence-transformers format."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from django_sbert.encoder.metrics import sts_spearman
from django_sbert.encoder.options import FitOptions
from django_sbert.encoder.training import (
    FitResult,
    Progress,
    TrainingCancelled,
    default_eval_every,
    default_min_steps,
    fit,
    linear_schedule,
)

TOPICS = [
    ["bank", "rate", "interest", "money", "market"],
    ["cat", "dog", "cats", "dogs", "child"],
    ["election", "vote", "party", "minister", "president"],
    ["guitar", "music", "play", "playing", "plays"],
    ["food", "eats", "eating", "price", "prices"],
    ["car", "cars", "fast", "slow", "runs"],
]


def toy_pairs(count: int, seed: int) -> list[tuple[str, str, float]]:
    """Same topic scores 1, different topics 0. Same-topic sentences share no word, so the
    model has to learn which words go together: word overlap alone does not solve it."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count // 2):
        a, b = rng.sample(range(len(TOPICS)), 2)
        words = rng.sample(TOPICS[a], 5)
        pairs.append((" ".join(words[:2]), " ".join(words[2:]), 1.0))
        pairs.append((" ".join(words[:2]), " ".join(rng.sample(TOPICS[b], 3)), 0.0))
    return pairs


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model's ops are too small to gain from threads, and lose a lot to contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def word_encoder(tiny_model_dir):
    """A fresh tiny encoder; its tokenizer knows the toy sentences' words (no [UNK] tokens)."""
    from django_sbert.encoder import SentenceEncoder
    from tests.tiny_model import build_vocab

    encoder = SentenceEncoder.load(tiny_model_dir)
    vocab = {word: index for index, word in enumerate(build_vocab())}
    assert encoder.tokenize(["bank"])["input_ids"].tolist() == [[2, vocab["bank"], 3]]
    return encoder


def weights(encoder) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in encoder.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cosine_fit_lowers_the_loss_and_raises_spearman(word_encoder):
    train, dev = toy_pairs(96, seed=0), toy_pairs(24, seed=1)
    before = weights(word_encoder)
    result = fit(
        word_encoder,
        train,
        loss="cosine",
        epochs=3,
        batch_size=8,
        learning_rate=1e-3,
        eval_examples=dev,
    )
    assert isinstance(result, FitResult) and result.steps == len(result.loss_history) == 36
    losses = [h["loss"] for h in result.loss_history]
    assert np.mean(losses[-6:]) < 0.5 * np.mean(losses[:6])
    spearman = [e["spearman"] for e in result.evaluations]
    assert [e["epoch"] for e in result.evaluations] == [0, 1, 2, 3]
    assert spearman[-1] > spearman[0] + 0.15
    assert sts_spearman(result.encoder, dev) == pytest.approx(spearman[-1])
    # The encoder passed in is untouched and still in eval mode; the copy is in eval mode too.
    assert same_weights(before, weights(word_encoder)) and not word_encoder.training
    assert not result.encoder.training and result.encoder is not word_encoder
    assert result.loss == {"name": "cosine"}


def test_mnrl_fit_learns_to_pick_the_positive(word_encoder):
    rng = random.Random(2)
    anchors = [(t, " ".join(rng.sample(TOPICS[t], 3))) for t in range(6) for _ in range(8)]
    pairs = [(text, " ".join(rng.sample(TOPICS[t], 3))) for t, text in anchors]
    result = fit(word_encoder, pairs, loss="mnrl", epochs=4, batch_size=6, learning_rate=1e-3)
    losses = [h["loss"] for h in result.loss_history]
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.2


@pytest.mark.parametrize(
    ("loss", "examples", "options"),
    [
        ("cosent", [("bank rate", "money market", 0.9), ("cat dog", "vote party", 0.1)] * 4, {}),
        ("softmax", [("bank rate", "money market", 0), ("cat dog", "vote party", 2)] * 4, {}),
        ("triplet", [("bank rate", "money market", "cat dog"), ("cat", "dogs", "vote")] * 4, {}),
        (
            "mnrl",
            [("bank", "money", "cat"), ("vote", "party", "car"), ("food", "eats", "guitar")],
            {},
        ),
        ("simcse", ["bank rate", "cat dog", "vote party", "food price"], {}),
        (
            "margin_mse",
            [("bank rate", "money market", "cat dog", 0.4), ("cat", "dogs", "vote", 0.3)] * 4,
            {},
        ),
        (
            "margin_mse",
            [
                ("bank rate", "money", "cat dog", "vote", [0.4, 0.5]),
                ("cat", "dogs", "car", "a", (0.3, 0.1)),
            ]
            * 4,
            {},
        ),
        (
            "matryoshka",
            [("bank rate", "money", 1.0), ("cat dog", "vote party", 0.0)] * 4,
            {"inner": "cosent", "dims": [32, 16, 8]},
        ),
    ],
)
def test_every_objective_trains_end_to_end(word_encoder, loss, examples, options):
    result = fit(word_encoder, examples, loss=loss, batch_size=4, loss_options=options)
    assert result.steps >= 1 and all(np.isfinite(h["loss"]) for h in result.loss_history)
    assert result.loss["name"] == loss
    vectors = result.encoder.encode(["bank rate"])
    assert vectors.shape == (1, 32) and np.isfinite(vectors).all()


def test_same_seed_same_model_other_seed_other_model(word_encoder):
    pairs = toy_pairs(32, seed=3)
    runs = [fit(word_encoder, pairs, batch_size=8, learning_rate=1e-3, seed=s) for s in (7, 7, 8)]
    assert runs[0].loss_history == runs[1].loss_history
    assert same_weights(weights(runs[0].encoder), weights(runs[1].encoder))
    assert not same_weights(weights(runs[0].encoder), weights(runs[2].encoder))


def test_callback_reports_progress_and_the_schedule_warms_up_then_decays(word_encoder):
    reports: list[Progress] = []
    result = fit(
        word_encoder,
        toy_pairs(80, seed=4),
        batch_size=4,
        learning_rate=1e-4,
        warmup_ratio=0.25,
        callback=reports.append,
        report_every=3,
    )
    assert [r.step for r in reports] == [3, 6, 9, 12, 15, 18, 20]
    assert all(r.total_steps == 20 and r.loss > 0 and r.seconds_left >= 0 for r in reports)
    assert reports[-1].seconds_left == 0
    rates = [h["learning_rate"] for h in result.loss_history]
    peak = rates.index(max(rates))
    assert peak == 5 and max(rates) == pytest.approx(1e-4)  # warmup: ceil(0.25 * 20) steps
    assert rates[:peak] == sorted(rates[:peak]) and rates[peak:] == sorted(
        rates[peak:], reverse=True
    )
    assert linear_schedule(20, 5, 20) == 0.0


class PeakingEvaluator:
    """An evaluator whose metric is scripted: it peaks at the third evaluation, whatever the
    weights. It records the weights it saw, so a test can tell which checkpoint came back."""

    def __init__(self, metrics: list[float]) -> None:
        self.metrics = metrics
        self.seen: list[dict[str, torch.Tensor]] = []

    def __call__(self, encoder) -> float:
        assert not encoder.training  # measured in eval mode (no dropout)
        self.seen.append(weights(encoder))
        return self.metrics[len(self.seen) - 1]


def test_early_stopping_keeps_the_best_checkpoint_and_stops_after_patience(word_encoder):
    # Evaluations at steps 0, 2, 4, 6, 8: the metric peaks at step 4, then two evaluations
    # without improvement exhaust a patience of 2, so the run stops at step 8 of 24.
    evaluator = PeakingEvaluator([0.2, 0.5, 0.9, 0.6, 0.4, 0.95, 0.95])
    before = weights(word_encoder)
    result = fit(
        word_encoder,
        toy_pairs(96, seed=6),
        loss="cosine",
        epochs=2,
        batch_size=8,
        learning_rate=1e-3,
        evaluator=evaluator,
        eval_every=2,
        patience=2,
        min_steps=0,
    )
    assert result.history == [(0, 0.2), (2, 0.5), (4, 0.9), (6, 0.6), (8, 0.4)]
    assert (result.best_step, result.best_metric) == (4, 0.9)
    assert result.steps == 8 == len(result.loss_history) and result.total_steps == 24
    assert result.stopped_early and result.eval_every == 2
    # The encoder returned holds the weights measured at step 4, not the last ones.
    peak, last = evaluator.seen[2], evaluator.seen[4]
    assert same_weights(weights(result.encoder), peak)
    assert not same_weights(peak, last) and not same_weights(peak, before)
    assert not result.encoder.training and same_weights(before, weights(word_encoder))


def test_early_stopping_only_measures_a_run_that_keeps_improving_trains_the_same_model(
    word_encoder,
):
    # Each evaluation encodes with the model being trained, as a run's evaluator does, and
    # reports a higher metric than the one before: the last step is kept. The steps between
    # must be the ones a run without early stopping trains (dropout on, the same random
    # draws), so the two runs end with the same weights.
    measured: list[float] = []

    def improving(encoder) -> float:
        encoder.encode(["bank rate", "cat dog", "guitar music"])
        measured.append(len(measured) + 1.0)
        return measured[-1]

    pairs = [(a, b) for a, b, score in toy_pairs(64, seed=9) if score == 1.0]
    plain = fit(word_encoder, pairs, loss="mnrl", batch_size=4, learning_rate=1e-3, seed=5)
    stopped = fit(
        word_encoder,
        pairs,
        loss="mnrl",
        batch_size=4,
        learning_rate=1e-3,
        seed=5,
        evaluator=improving,
        eval_every=2,
        min_steps=0,
    )
    assert stopped.steps == plain.steps == stopped.best_step and len(measured) > 3
    assert stopped.loss_history == plain.loss_history
    assert same_weights(weights(stopped.encoder), weights(plain.encoder))


def test_early_stopping_without_patience_runs_to_the_end_and_keeps_the_best(word_encoder):
    metrics = [0.1, 0.3, 0.7, 0.2, 0.1, 0.1, 0.1]
    evaluator = PeakingEvaluator(metrics)
    result = fit(
        word_encoder,
        toy_pairs(48, seed=7),
        loss="cosine",
        batch_size=8,
        learning_rate=1e-3,
        evaluator=evaluator,
    )
    # 6 steps; eval_every from the run size: every step (fewer than ten steps).
    assert result.eval_every == 1 and [s for s, _ in result.history] == [0, 1, 2, 3, 4, 5, 6]
    assert result.steps == result.total_steps == 6 and not result.stopped_early
    assert result.best_step == 2 and same_weights(weights(result.encoder), evaluator.seen[2])


def test_early_stopping_keeps_the_encoder_given_when_training_never_improves(word_encoder):
    evaluator = PeakingEvaluator([0.8, 0.5, 0.4, 0.3])
    result = fit(
        word_encoder,
        toy_pairs(96, seed=8),
        loss="cosine",
        batch_size=8,
        learning_rate=1e-3,
        evaluator=evaluator,
        eval_every=3,
        patience=2,
    )
    assert result.best_step == 0 and result.steps == 6
    assert same_weights(weights(result.encoder), weights(word_encoder))


# Two epochs of batches of 8, an evaluation every 2 steps, patience 2.
EVERY_TWO_STEPS = dict(
    loss="cosine", epochs=2, batch_size=8, learning_rate=1e-3, eval_every=2, patience=2
)


def test_early_stopping_never_stops_before_min_steps(word_encoder):
    # 2 epochs of 6 steps, evaluations every 2 steps, patience 2. The metric dips below the
    # start over the first evaluations and peaks at step 6: with no minimum the run stops at
    # step 4 and keeps the encoder given; the default minimum (the first epoch) trains on to
    # the peak, keeps it, and stops once patience runs out after it.
    metrics = [0.8, 0.5, 0.4, 0.9, 0.3, 0.2, 0.1]
    hasty = fit(
        word_encoder,
        toy_pairs(48, seed=10),
        **EVERY_TWO_STEPS,
        evaluator=PeakingEvaluator(metrics),
        min_steps=0,
    )
    assert (hasty.steps, hasty.best_step, hasty.min_steps) == (4, 0, 0)
    evaluator = PeakingEvaluator(metrics)
    result = fit(word_encoder, toy_pairs(48, seed=10), **EVERY_TWO_STEPS, evaluator=evaluator)
    assert result.total_steps == 12 and result.min_steps == 6
    assert [s for s, _ in result.history] == [0, 2, 4, 6, 8, 10]
    assert (result.best_step, result.best_metric) == (6, 0.9) and result.steps == 10
    assert same_weights(weights(result.encoder), evaluator.seen[3])
    # A step before the minimum is still kept when it is the best measured.
    early = fit(
        word_encoder,
        toy_pairs(48, seed=10),
        **EVERY_TWO_STEPS,
        evaluator=PeakingEvaluator([0.1, 0.9, 0.5, 0.4, 0.3, 0.2]),
    )
    assert (early.best_step, early.steps) == (2, 6)


def test_a_tolerance_keeps_the_latest_step_within_it_of_the_best(word_encoder):
    # Evaluations at steps 0, 2, ..., 12, patience 2, no minimum. The top (0.82) comes at
    # step 4; steps 6 and 8 measure within 0.01 of it, so with that tolerance each becomes the
    # kept checkpoint and resets the patience, and step 10 (0.805) and 12 (0.80) exhaust it.
    # Without a tolerance step 4 is kept and the run stops at step 8.
    metrics = [0.5, 0.7, 0.82, 0.815, 0.812, 0.805, 0.80]
    strict = fit(
        word_encoder,
        toy_pairs(64, seed=11),
        **EVERY_TWO_STEPS,
        evaluator=PeakingEvaluator(metrics),
        min_steps=0,
    )
    assert (strict.best_step, strict.best_metric, strict.steps) == (4, 0.82, 8)
    evaluator = PeakingEvaluator(metrics)
    tolerant = fit(
        word_encoder,
        toy_pairs(64, seed=11),
        **EVERY_TWO_STEPS,
        evaluator=evaluator,
        min_steps=0,
        tolerance=0.01,
    )
    assert (tolerant.best_step, tolerant.best_metric, tolerant.steps) == (8, 0.812, 12)
    assert same_weights(weights(tolerant.encoder), evaluator.seen[4])
    # Within the tolerance of the top, not of the step kept: no drift downwards.
    assert tolerant.history[-2:] == [(10, 0.805), (12, 0.80)]
    with pytest.raises(ValueError, match="tolerance must be a number >= 0"):
        fit(word_encoder, toy_pairs(16, seed=9), evaluator=lambda e: 0.0, tolerance=-0.1)
    with pytest.raises(ValueError, match="need an evaluator"):
        fit(word_encoder, toy_pairs(16, seed=9), tolerance=0.01)


def test_default_min_steps_is_an_epoch_and_at_most_half_the_run():
    def plan(epochs: int, steps: int) -> list[tuple[int, None]]:
        return [(epoch, None) for epoch in range(1, epochs + 1) for _ in range(steps)]

    assert default_min_steps(plan(2, 6)) == 6
    assert default_min_steps(plan(3, 4)) == 4
    assert default_min_steps(plan(1, 10)) == 5
    assert default_min_steps(plan(1, 1)) == 1
    assert default_min_steps([]) == 0


def test_default_eval_every_follows_the_run_size():
    assert [default_eval_every(n) for n in (1, 9, 10, 11, 95, 400)] == [1, 1, 1, 2, 10, 40]


def test_early_stopping_settings_are_checked_before_training(word_encoder):
    pairs = toy_pairs(16, seed=9)
    with pytest.raises(ValueError, match="eval_every must be a whole number >= 1"):
        fit(word_encoder, pairs, evaluator=lambda e: 0.0, eval_every=0)
    with pytest.raises(ValueError, match="patience must be a whole number >= 1"):
        fit(word_encoder, pairs, evaluator=lambda e: 0.0, patience=0)
    with pytest.raises(ValueError, match="need an evaluator"):
        fit(word_encoder, pairs, patience=3)
    with pytest.raises(ValueError, match="min_steps must be a whole number >= 0"):
        fit(word_encoder, pairs, evaluator=lambda e: 0.0, min_steps=-1)
    with pytest.raises(ValueError, match="need an evaluator"):
        fit(word_encoder, pairs, min_steps=3)


def test_cancellation_stops_before_the_next_step_and_writes_nothing(
    word_encoder, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    before = weights(word_encoder)
    polls = []

    def should_stop() -> bool:
        polls.append(1)
        return len(polls) > 3  # ask to stop after three steps

    with pytest.raises(TrainingCancelled, match="after 3 of 12 steps") as caught:
        fit(word_encoder, toy_pairs(96, seed=5), batch_size=8, should_stop=should_stop)
    assert caught.value.step == 3 and len(caught.value.history) == 3 and len(polls) == 4
    assert list(tmp_path.iterdir()) == []
    assert same_weights(before, weights(word_encoder))


@pytest.mark.parametrize(
    ("examples", "settings", "message"),
    [
        (
            [("a", "b")],
            {},
            r"loss 'cosine' expects examples shaped \(sentence_a, sentence_b, score\)",
        ),
        ([("a", "b", 3.5)], {}, "divided by 5"),
        ([("a", "b", "c")], {"loss": "mnrl", "batch_size": 1}, "batch_size must be at least 2"),
        ([("a", "b", 0.5)], {"learning_rate": -1e-5}, "learning_rate must be > 0"),
        ([("a", "b", 0.5)], {"epochs": 0}, "epochs must be a whole number >= 1"),
        ([("a", "b", 0.5)], {"loss": "cosinus"}, "Unknown loss 'cosinus'; choose one of"),
        ([("a", "b", 0.5)], {"warmup_ratio": 1.5}, r"warmup_ratio must be in \[0, 1\)"),
        ([("a", "b")], {"loss": "triplet"}, r"\(anchor, positive, negative\)"),
        ([("a", "p"), ("a", "q")], {"loss": "mnrl"}, "make no batch of two or more distinct texts"),
    ],
)
def test_bad_input_fails_before_training(tiny_encoder, examples, settings, message):
    def never() -> bool:
        raise AssertionError("training started")

    with pytest.raises(ValueError, match=message):
        fit(tiny_encoder, examples, should_stop=never, **settings)


def test_eval_examples_are_checked_too(tiny_encoder):
    with pytest.raises(ValueError, match="eval_examples"):
        fit(tiny_encoder, [("a", "b", 0.5)], eval_examples=[("a", "b")])


def test_trained_copy_round_trips_and_loads_in_sentence_transformers(word_encoder, tmp_path):
    from sentence_transformers import SentenceTransformer

    from django_sbert.encoder import SentenceEncoder

    trained = fit(word_encoder, toy_pairs(32, seed=6), batch_size=8, learning_rate=1e-3).encoder
    trained.save(tmp_path / "trained")
    texts = ["bank rate money", "cat dog child plays"]
    expected = trained.encode(texts)
    assert not np.allclose(expected, word_encoder.encode(texts))  # training changed something
    np.testing.assert_allclose(
        SentenceEncoder.load(tmp_path / "trained").encode(texts), expected, atol=1e-5
    )
    st_vectors = SentenceTransformer(str(tmp_path / "trained"), device="cpu").encode(texts)
    np.testing.assert_allclose(st_vectors, expected, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_stays_on_the_gpu(word_encoder):
    gpu_encoder = word_encoder.copy().to("cuda")
    result = fit(gpu_encoder, toy_pairs(16, seed=7), batch_size=8)
    assert result.encoder.device.type == "cuda"


@pytest.mark.slow
def test_minilm_short_fine_tune_keeps_sentence_transformers_compatibility(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    pairs = [
        ("A man is playing a guitar.", "A man plays the guitar.", 0.95),
        ("A woman is slicing an onion.", "A man is riding a horse.", 0.0),
        ("The cat sits on the mat.", "A cat is sitting on a mat.", 0.9),
        ("Stocks fell sharply today.", "A child is eating food.", 0.05),
    ] * 4
    result = fit(minilm, pairs, batch_size=8)
    assert result.steps == 2
    result.encoder.save(tmp_path / "minilm-tuned")
    texts = ["A man plays music.", "Interest rates are rising."]
    st_vectors = SentenceTransformer(str(tmp_path / "minilm-tuned"), device="cpu").encode(texts)
    np.testing.assert_allclose(st_vectors, result.encoder.encode(texts), atol=1e-4)


def test_fit_takes_fit_options_and_its_fields_one_by_one_still_train_the_same(word_encoder):
    """``fit(..., FitOptions(...))`` trains as the same numbers given one by one (which warn);
    an unknown name is a TypeError, a bad value the ValueError it always was."""
    pairs = toy_pairs(32, seed=3)
    options = FitOptions(batch_size=8, learning_rate=1e-3, seed=7)
    by_options = fit(word_encoder, pairs, "cosine", options)
    with pytest.warns(DeprecationWarning, match="FitOptions"):
        one_by_one = fit(word_encoder, pairs, batch_size=8, learning_rate=1e-3, seed=7)
    assert by_options.loss_history == one_by_one.loss_history
    assert same_weights(weights(by_options.encoder), weights(one_by_one.encoder))
    with pytest.raises(TypeError, match="batchsize"):
        fit(word_encoder, pairs, batchsize=8)
    with pytest.raises(ValueError, match="precision"):
        fit(word_encoder, pairs, options=FitOptions(precision="half"))
