"""What makes a fine-tuning step cheaper on a CPU: shorter texts in the training steps only
(``fit(max_seq_length=...)``) and in-batch-negative batches of similar length
(``fit(length_buckets=True)``), each still training on every example once per epoch."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch

from django_sbert.encoder.data import (
    MEGA_BATCH_FACTOR,
    Example,
    length_bucketed_unique_batches,
    unique_text_batches,
    validate_examples,
)
from django_sbert.encoder.losses import build_loss
from django_sbert.encoder.training import example_lengths, fit, plan_batches
from tests.encoder.test_training import TOPICS


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mixed_length_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """Pairs of one to twelve words per text (and a number), every text distinct."""
    rng = random.Random(seed)
    pairs = []
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        size = rng.randint(1, 12)
        anchor = " ".join(rng.choices(topic, k=size)) + f" {n}"
        positive = " ".join(rng.choices(topic, k=size)) + f" {n} {n}"
        pairs.append((anchor, positive))
    return pairs


def words(example: Example) -> int:
    return sum(len(text.split()) for text in example.texts)


def test_length_buckets_visit_every_example_once_with_no_text_twice_in_a_batch():
    examples = [Example(p) for p in mixed_length_pairs(200)]
    # A text shared by two examples (one anchor, two positives) must wait for another batch.
    examples.append(Example((examples[0].texts[0], "bank rate 999")))
    batches = length_bucketed_unique_batches(examples, 8, random.Random(0), length=words)
    seen = Counter(e for batch in batches for e in batch)
    assert set(seen) == set(examples) and set(seen.values()) == {1}
    for batch in batches:
        texts = [text for e in batch for text in e.texts]
        # 201 examples: the one left alone at the end joins a batch (one over the size).
        assert len(texts) == len(set(texts)) and 2 <= len(batch) <= 9


def test_length_buckets_group_similar_lengths_and_shuffle_the_batch_order():
    examples = [Example(p) for p in mixed_length_pairs(320)]
    rng = random.Random(1)
    bucketed = length_bucketed_unique_batches(examples, 8, rng, length=words)
    plain = unique_text_batches(examples, 8, random.Random(1))

    def spread(batches: list[list[Example]]) -> float:  # longest less shortest, on average
        return sum(max(map(words, b)) - min(map(words, b)) for b in batches) / len(batches)

    def padded(batches: list[list[Example]]) -> int:  # what a step pays: batch x longest
        return sum(len(b) * max(map(words, b)) for b in batches)

    # 320 examples, batch 8: under one mega-batch, so the whole epoch is sorted by length.
    assert len(examples) <= 8 * MEGA_BATCH_FACTOR
    assert spread(bucketed) <= 2 < spread(plain)
    assert padded(bucketed) < 0.75 * padded(plain)
    # The run does not go from short to long texts: the batches' order is shuffled.
    longest = [max(map(words, b)) for b in bucketed]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)


def test_plan_batches_buckets_only_when_given_lengths(word_encoder_tokenizer):
    data = validate_examples(mixed_length_pairs(64), build_loss("mnrl", 32))
    objective = build_loss("mnrl", 32)
    lengths = example_lengths(word_encoder_tokenizer, data)
    # Tokens per example: both texts, special tokens included, as the tokenizer cuts them.
    first = data[0]
    assert lengths[first] == sum(
        len(word_encoder_tokenizer.truncated([t]).ids) for t in first.texts
    )
    plain = plan_batches(data, objective, 2, 8, random.Random(0))
    assert plain == plan_batches(data, objective, 2, 8, random.Random(0), None)
    bucketed = plan_batches(data, objective, 2, 8, random.Random(0), lengths)
    assert bucketed != plain
    for epoch in (1, 2):
        epoch_examples = [e for n, batch in bucketed if n == epoch for e in batch]
        assert sorted(map(id, epoch_examples)) == sorted(map(id, data))


@pytest.fixture(scope="module")
def word_encoder_tokenizer(tiny_encoder):
    return tiny_encoder.tokenizer


def test_training_steps_read_max_seq_length_tokens_and_the_model_keeps_its_own(tiny_encoder):
    pairs = mixed_length_pairs(32)
    widths: list[int] = []
    evaluated: list[int] = []

    def hook(module, args, kwargs):
        width = kwargs["input_ids"].shape[1]
        (widths if module.training else evaluated).append(width)

    long_text = " ".join(TOPICS[0] * 20)  # 100 words: past the tiny model's 64 tokens
    handle = tiny_encoder.transformer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        result = fit(
            tiny_encoder,
            [*pairs, (long_text, long_text + " again")],
            loss="mnrl",
            batch_size=8,
            max_seq_length=8,
            evaluator=lambda model: float(model.encode([long_text])[0][0]),
            eval_every=2,
        )
    finally:
        handle.remove()
    assert widths and max(widths) == 8  # the long pair was cut to 8 tokens
    assert evaluated and max(evaluated) == tiny_encoder.max_seq_length == 64
    assert result.encoder.max_seq_length == 64
    assert result.encoder.tokenizer.truncated([long_text]).lengths.tolist() == [64]


def test_length_buckets_train_on_every_example(tiny_encoder):
    pairs = mixed_length_pairs(48)
    result = fit(tiny_encoder, pairs, loss="mnrl", batch_size=8, epochs=2, length_buckets=True)
    # 48 examples with distinct texts, batch 8: six full batches an epoch.
    assert result.steps == result.total_steps == 12
    assert result.encoder.max_seq_length == tiny_encoder.max_seq_length


def test_max_seq_length_is_checked_before_training(tiny_encoder):
    with pytest.raises(ValueError, match="max_seq_length must be a whole number >= 2"):
        fit(tiny_encoder, mixed_length_pairs(8), loss="mnrl", max_seq_length=1)
    with pytest.raises(ValueError, match="max_seq_length must be a whole number >= 2"):
        tiny_encoder.tokenizer.truncating_at(0)
    # Longer than the model reads: the model's own length.
    assert tiny_encoder.tokenizer.truncating_at(10_000).max_seq_length == 64


class CountingEncoder:
    """The real encoder, counting the texts it is asked to encode."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.texts: list[str] = []

    def encode(self, texts, batch_size=32, normalize=True):
        self.texts.extend(texts)
        return self.encoder.encode(texts, batch_size=batch_size, normalize=normalize)


def test_vector_cache_gives_the_vectors_of_a_full_encode_and_encodes_each_text_once(
    tiny_encoder,
):
    from django_sbert.encoder.metrics import VectorCache, retrieval_metrics

    pairs = mixed_length_pairs(40)
    queries = {f"q{n}": a for n, (a, _) in enumerate(pairs)}
    corpus = {f"d{n}": b for n, (_, b) in enumerate(pairs)}
    relevant = {f"q{n}": {f"d{n}"} for n in range(len(pairs))}
    counting = CountingEncoder(tiny_encoder)
    cache = VectorCache(counting)
    texts = list(corpus.values())
    assert np.array_equal(cache.encode(texts), tiny_encoder.encode(texts))
    first = retrieval_metrics(cache, queries, corpus, relevant)
    assert first == retrieval_metrics(tiny_encoder, queries, corpus, relevant)
    again = retrieval_metrics(cache, queries, corpus, relevant)
    assert again == first
    # Every distinct text went through the model once, whatever was asked twice.
    assert sorted(counting.texts) == sorted(set(texts) | set(queries.values()))
    assert cache.encode(texts[3]).shape == (tiny_encoder.dimensions,)
    assert VectorCache(tiny_encoder).dimensions == tiny_encoder.dimensions  # the rest: its own
