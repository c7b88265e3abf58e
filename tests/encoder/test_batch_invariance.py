"""Same text, same vector: ``encode(texts, alone=True)`` gives each text the vector it gets
encoded on its own, bit for bit, in any list (mixed lengths, any order, any batch size), on
the torch float32 and bfloat16 paths and through ONNX Runtime; a batch's vectors, on the other
hand, may move (the reason ``alone`` exists). The real model in bfloat16 shows the size of
that move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from django_sbert.encoder import SentenceEncoder
from tests.encoder.test_encode import sentences

MIXED = sentences(24, seed=3) + ["a", "the market falls " * 20]


def each_alone(encoder: SentenceEncoder, texts: list[str]) -> np.ndarray:
    return np.stack([encoder.encode(text) for text in texts])


@pytest.fixture(scope="module")
def bf16_encoder(tiny_model_dir: Path) -> SentenceEncoder:
    return SentenceEncoder.load(tiny_model_dir, dtype="bfloat16")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_alone_in_any_list_is_the_vector_of_the_text_on_its_own(tiny_encoder, bf16_encoder, dtype):
    encoder = tiny_encoder if dtype == "float32" else bf16_encoder
    reference = each_alone(encoder, MIXED)
    rng = np.random.default_rng(0)
    for batch_size in (1, 3, 16, 64):
        order = rng.permutation(len(MIXED))
        vectors = encoder.encode([MIXED[i] for i in order], batch_size=batch_size, alone=True)
        np.testing.assert_array_equal(vectors, reference[order])
    assert encoder.encode(MIXED[:2], alone=True, normalize=False).shape == (2, 32)


def test_alone_on_the_threads_a_lone_query_gets(tiny_encoder):
    """A thread count changes how a matrix product splits its sums (1e-8 here), so serving
    encodes every query on QUERY_THREADS: the list on one thread equals each text on one."""
    reference = np.stack([tiny_encoder.encode(text, threads=1) for text in MIXED])
    np.testing.assert_array_equal(tiny_encoder.encode(MIXED, alone=True, threads=1), reference)


def test_long_texts_in_windows_are_each_encoded_alone(tiny_encoder):
    long = " ".join(MIXED)  # several windows of the tiny model's 64 tokens
    vector = tiny_encoder.encode([long], long_text="chunk", alone=True)[0]
    listed = tiny_encoder.encode([MIXED[0], long], long_text="chunk", alone=True)
    np.testing.assert_array_equal(listed[1], vector)


def test_alone_through_onnx_runtime(tiny_model_dir: Path, tmp_path: Path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    encoder = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", query_threads=1, compile_cache=tmp_path
    )
    reference = each_alone(encoder, MIXED)
    assert encoder.query_runtime_failure is None and encoder._onnx  # ONNX Runtime served them
    np.testing.assert_array_equal(encoder.encode(MIXED[::-1], alone=True), reference[::-1])


@pytest.mark.slow
def test_the_real_model_in_bf16_moves_in_batches_and_not_alone():
    """all-MiniLM-L6-v2 in bfloat16, 64 texts of 1 to 40 words: batched vectors differ from
    alone by far more than 1e-6 (what made rankings depend on concurrency); alone, by 0."""
    texts = sentences(64, seed=5)
    encoder = SentenceEncoder.load("all-MiniLM-L6-v2", dtype="bfloat16", threads=1)
    reference = each_alone(encoder, texts)
    batched = encoder.encode(texts, batch_size=16)
    assert np.abs(batched - reference).max() > 1e-5
    np.testing.assert_array_equal(encoder.encode(texts, batch_size=16, alone=True), reference)
