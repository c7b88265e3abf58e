"""encode(): input checking, batching order, long texts, threads, quantization."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.tokenization import bucket_width

WORDS = [
    "the",
    "cat",
    "dog",
    "bank",
    "rates",
    "rise",
    "fall",
    "market",
    "city",
    "people",
    "music",
    "food",
    "runs",
    "fast",
    "slow",
]


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, 40))) for _ in range(n)]


def test_non_string_item_raises_type_error_naming_its_index(tiny_encoder):
    with pytest.raises(TypeError, match="item 2 is int"):
        tiny_encoder.encode(["a", "b", 3])
    with pytest.raises(TypeError, match="item 0 is NoneType"):
        tiny_encoder.encode([None])


def test_empty_inputs(tiny_encoder):
    assert tiny_encoder.encode([]).shape == (0, 32)
    vector = tiny_encoder.encode("")
    assert vector.shape == (32,) and np.isfinite(vector).all()
    assert np.isclose(np.linalg.norm(vector), 1.0)


def test_bad_arguments_are_reported(tiny_encoder):
    with pytest.raises(ValueError, match="batch_size"):
        tiny_encoder.encode(["a"], batch_size=0)
    with pytest.raises(ValueError, match="long_text"):
        tiny_encoder.encode(["a"], long_text="split")
    with pytest.raises(ValueError, match="chunk_overlap"):
        tiny_encoder.encode(["a"], long_text="chunk", chunk_overlap=500)


def test_order_is_restored_and_independent_of_batching(tiny_encoder):
    texts = sentences(100)
    together = tiny_encoder.encode(texts, batch_size=7)
    alone = np.stack([tiny_encoder.encode(t) for t in texts[:20]])
    np.testing.assert_allclose(together[:20], alone, atol=1e-5)
    np.testing.assert_allclose(
        tiny_encoder.encode(texts[::-1], batch_size=64)[::-1], together, atol=1e-5
    )


def test_bucket_widths():
    assert [bucket_width(w, 256) for w in (1, 17, 32)] == [1, 17, 32]  # short: no padding
    assert [bucket_width(w, 256) for w in (33, 36, 37, 64, 65, 129, 250, 256)] == [
        36, 36, 40, 64, 72, 144, 256, 256
    ]  # fmt: skip
    assert bucket_width(97, 100) == 100  # never past the limit (max_seq_length)
    assert len({bucket_width(w, 256) for w in range(1, 257)}) == 56


def test_batches_are_padded_to_a_few_widths_with_the_same_vectors(tmp_path):
    from tests.tiny_model import build_tiny_model

    encoder = SentenceEncoder.load(build_tiny_model(tmp_path / "m", max_seq_length=100))
    widths: list[int] = []

    def record(module, args, kwargs):
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        widths.append(ids.shape[1])

    hook = encoder.transformer.register_forward_pre_hook(record, with_kwargs=True)
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 120))) for _ in range(1000)]
    try:
        together = encoder.encode(texts, batch_size=4)
        batches = set(widths)
        widths.clear()
        alone = np.stack([encoder.encode(t) for t in texts[:40]])
    finally:
        hook.remove()
    # Texts of every length from 3 tokens ([CLS] word [SEP]) to 100 (max_seq_length), yet
    # batches came in the 43 bucketed widths only; a lone text keeps its own width.
    lengths = [len(encoder.tokenizer.truncated([t]).ids) for t in texts]
    assert set(lengths) == set(range(3, 101))
    assert batches == {bucket_width(w, 100) for w in range(3, 101)}, sorted(batches)
    assert len(batches) == 43 and 37 not in batches
    assert set(widths) == set(lengths[:40])
    np.testing.assert_allclose(together[:40], alone, atol=1e-5)


def test_normalize_switch(tiny_model_dir, tmp_path):
    import json
    import shutil

    path = tmp_path / "raw"
    shutil.copytree(tiny_model_dir, path)
    modules = json.loads((path / "modules.json").read_text())[:2]  # drop Normalize
    (path / "modules.json").write_text(json.dumps(modules))
    encoder = SentenceEncoder.load(path)
    raw = encoder.encode(["the cat", "the dog runs"], normalize=False)
    unit = encoder.encode(["the cat", "the dog runs"], normalize=True)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_chunking_covers_the_whole_text(tiny_encoder):
    short = "the cat eats food"
    assert np.allclose(tiny_encoder.encode(short, long_text="chunk"), tiny_encoder.encode(short))
    head = "bank rates rise " * 30  # fills the 64-token window on its own
    tail = " music food dog " * 30
    truncated = tiny_encoder.encode([head + tail, head], long_text="truncate")
    np.testing.assert_allclose(truncated[0], truncated[1], atol=1e-6)  # the tail is cut off
    chunked = tiny_encoder.encode([head + tail, head], long_text="chunk")
    assert not np.allclose(chunked[0], chunked[1], atol=1e-3)  # the tail counts
    rows = tiny_encoder.tokenizer.windows([head + tail], overlap=8)
    assert len(rows) > 2 and rows.lengths.max() == tiny_encoder.max_seq_length


@pytest.mark.heavy
def test_one_megabyte_string(tiny_encoder):
    import psutil

    text = ("the market rises and the bank rates fall " * 25_000)[:1_000_000]
    process = psutil.Process()
    before = process.memory_info().rss
    truncated = tiny_encoder.encode(text)
    chunked = tiny_encoder.encode(text, long_text="chunk", batch_size=64)
    grown_mb = (process.memory_info().rss - before) / 2**20
    assert truncated.shape == chunked.shape == (32,)
    assert np.isfinite(chunked).all()
    assert grown_mb < 300, f"encoding a 1 MB string grew the process by {grown_mb:.0f} MB"


def test_concurrent_threads_get_correct_results(tiny_encoder):
    texts = sentences(200, seed=1)
    expected = tiny_encoder.encode(texts)
    batches = [texts[i::8] for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda chunk: tiny_encoder.encode(chunk, batch_size=5), batches))
    for i, result in enumerate(results):
        np.testing.assert_allclose(result, expected[i::8], atol=1e-5)


@pytest.mark.heavy
def test_memory_stays_flat_over_repeated_encodes(tiny_encoder):
    import gc

    import psutil

    texts = sentences(2_000, seed=2)
    process = psutil.Process()
    tiny_encoder.encode(texts)  # warm up allocator pools
    gc.collect()
    before = process.memory_info().rss
    for _ in range(10):
        tiny_encoder.encode(texts)
    gc.collect()
    grown_mb = (process.memory_info().rss - before) / 2**20
    assert grown_mb < 50, f"memory grew {grown_mb:.0f} MB over 10 encodes"


def test_int8_quantization_keeps_vectors_close(tiny_model_dir, tmp_path):
    texts = sentences(50, seed=3)
    full = SentenceEncoder.load(tiny_model_dir)
    quantized = SentenceEncoder.load(tiny_model_dir, quantize="int8")
    assert quantized.quantized == "int8"
    cosine = (full.encode(texts) * quantized.encode(texts)).sum(axis=1)
    assert cosine.min() > 0.95
    # Activation scales are computed per batch, so batch neighbours move a vector only slightly.
    alone, batched = quantized.encode(texts[:1])[0], quantized.encode(texts)[0]
    assert float(alone @ batched) > 0.99
    with pytest.raises(ValueError, match="cannot be saved"):
        quantized.save(tmp_path / "q")


def test_bfloat16_option(tiny_model_dir):
    texts = sentences(20, seed=4)
    full = SentenceEncoder.load(tiny_model_dir).encode(texts)
    half = SentenceEncoder.load(tiny_model_dir, dtype="bfloat16").encode(texts)
    assert half.dtype == np.float32
    assert (full * half).sum(axis=1).min() > 0.98


def test_copy_is_independent(tiny_encoder):
    clone = tiny_encoder.copy()
    first = next(clone.transformer.parameters())
    first.data.add_(1.0)
    assert not np.allclose(clone.encode("the cat"), tiny_encoder.encode("the cat"))


def test_threads_apply_to_one_call_and_are_restored(tiny_encoder):
    import torch

    texts = ["a short query", "another, somewhat longer, text to encode"]
    before = torch.get_num_threads()
    seen = []
    hook = tiny_encoder.pooling.register_forward_hook(
        lambda *args: seen.append(torch.get_num_threads())
    )
    try:
        one_thread = tiny_encoder.encode(texts, threads=1)
    finally:
        hook.remove()
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before
    np.testing.assert_allclose(one_thread, tiny_encoder.encode(texts), atol=1e-6)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        tiny_encoder.encode(texts, threads=0)
    assert torch.get_num_threads() == before


def test_loading_prints_no_progress_bar_and_leaves_the_setting(tiny_model_dir, capfd):
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    SentenceEncoder.load(tiny_model_dir)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the caller's setting is restored
