"""encode() through torch.compile: the same vectors as eager mode, never a new way to fail,
one query graph per architecture (not per version), none after warm-up whatever the lengths."""

from __future__ import annotations

import pickle
import random
import subprocess

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.compiled import external_cause

pytestmark = pytest.mark.heavy  # every test compiles

TEXTS = [
    "A plane is taking off.",
    "A man is playing a large flute.",
    "",
    "Central banks raised interest rates again. " * 40,  # past max_seq_length
    "x",
    "Three dogs run across a snowy field near the river.",
]


@pytest.fixture(scope="module")
def compiled_tiny(tiny_model_dir):
    return SentenceEncoder.load(tiny_model_dir, compile=True)


def graphs() -> int:
    """Graphs torch.compile has built in this process (each one is a compile)."""
    return counters["stats"]["unique_graphs"]


def test_compiled_vectors_equal_eager_ones(compiled_tiny, tiny_encoder):
    assert compiled_tiny.compiled and compiled_tiny._compiled is None  # built on first use
    torch._dynamo.reset()  # graphs of the tiny model that earlier tests built are forgotten
    before = graphs()
    batches = compiled_tiny.encode(TEXTS, batch_size=4)  # batches of 4 and 2: one graph
    assert graphs() == before + 1  # really compiled, in one piece
    assert not counters["graph_break"]
    assert compiled_tiny._compiled is not None and compiled_tiny._compiled.active
    np.testing.assert_allclose(batches, tiny_encoder.encode(TEXTS, batch_size=4), atol=1e-5)
    single = compiled_tiny.encode(TEXTS[0])  # a single text: its own graph
    assert graphs() == before + 2
    np.testing.assert_allclose(single, tiny_encoder.encode(TEXTS[0]), atol=1e-5)
    # Another thread count (QUERY_THREADS) gives the same vectors.
    again = compiled_tiny.encode(TEXTS, batch_size=4, threads=1)
    np.testing.assert_allclose(again, batches, atol=1e-6)


def test_copies_and_pickles_are_not_compiled(compiled_tiny):
    clone = compiled_tiny.copy()
    assert not clone.compiled and clone._compiled is None
    assert not pickle.loads(pickle.dumps(compiled_tiny)).compiled
    assert compiled_tiny.compiled


def test_training_switches_compiling_off(tiny_model_dir):
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True)
    with pytest.warns(RuntimeWarning, match="train\\(\\) switched torch.compile off"):
        encoder.train()
    assert not encoder.compiled
    encoder(encoder.tokenize(TEXTS[:3])).sum().backward()  # gradients flow, eager
    assert any(p.grad is not None for p in encoder.transformer.parameters())


def test_new_weights_reach_the_compiled_encoder(tiny_model_dir, tiny_encoder):
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True)
    before = encoder.encode(TEXTS, batch_size=4)
    state = {k: v * 1.5 if v.is_floating_point() else v for k, v in encoder.state_dict().items()}
    encoder.load_state_dict(state)
    after = encoder.encode(TEXTS, batch_size=4)
    assert encoder.compiled and np.abs(after - before).max() > 1e-3
    reference = tiny_encoder.copy()
    reference.load_state_dict(state)
    np.testing.assert_allclose(after, reference.encode(TEXTS, batch_size=4), atol=1e-5)


def test_another_version_reuses_the_single_query_graph(tiny_model_dir, tmp_path):
    """A promoted version is a new encoder of the same architecture: a web process's query
    graph serves it as it is; batches (a worker's) compile once for it, with its own weights."""
    first = SentenceEncoder.load(tiny_model_dir, compile=True)
    first.encode(TEXTS, batch_size=4)
    first.encode(TEXTS[0])
    tuned = SentenceEncoder.load(tiny_model_dir)
    with torch.no_grad():
        for parameter in tuned.transformer.parameters():
            parameter.mul_(1.3)
    tuned.save(tmp_path / "tuned")
    eager = SentenceEncoder.load(tmp_path / "tuned")
    version = SentenceEncoder.load(tmp_path / "tuned", compile=True)
    before = graphs()
    single = version.encode(TEXTS[0])
    assert graphs() == before  # the single-query graph takes the weights as inputs
    batches = version.encode(TEXTS, batch_size=4)
    assert graphs() == before + 1  # the batch graph froze the first model's weights
    assert version.compiled and version._compiled.active
    np.testing.assert_allclose(batches, eager.encode(TEXTS, batch_size=4), atol=1e-5)
    np.testing.assert_allclose(single, eager.encode(TEXTS[0]), atol=1e-5)
    assert np.abs(batches - first.encode(TEXTS, batch_size=4)).max() > 1e-3  # its own weights


def test_no_compile_after_warm_up_over_mixed_lengths(compiled_tiny, tiny_encoder):
    """1,000 texts of random lengths, in batches of random sizes: dynamic shapes, no compile."""
    compiled_tiny.encode(["warm up", "a batch of two texts"])
    compiled_tiny.encode("warm up")
    words = ["the", "bank", "raised", "interest", "rates", "while", "markets", "fell"]
    rng = random.Random(7)
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 300))) for _ in range(1000)]
    before = graphs()
    done, vectors = 0, []
    while done < len(texts):
        size = rng.choice([1, 1, 2, 3, 7, 16, 32])
        part = texts[done : done + size]
        vectors.append(compiled_tiny.encode(part, batch_size=rng.choice([4, 16, 32])))
        done += size
    assert graphs() == before, "a text length or batch size made torch.compile build a graph"
    assert compiled_tiny.compiled
    np.testing.assert_allclose(
        np.concatenate(vectors), tiny_encoder.encode(texts, batch_size=32), atol=1e-5
    )


def test_a_failed_compile_warns_once_and_falls_back_to_eager(tiny_model_dir, tiny_encoder):
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    # No C++ compiler, and no cached graph that would make one unnecessary. (The configs' own
    # patch(), not monkeypatch: their attributes are not plain module attributes.)
    no_compiler = inductor_config.patch(
        {"cpp.cxx": ("/nonexistent/bin/c++",), "fx_graph_cache": False}
    )
    torch._dynamo.reset()
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True)
    with (
        no_compiler,
        functorch_config.patch(enable_autograd_cache=False),
        pytest.warns(RuntimeWarning, match="torch.compile failed.*eager mode"),
    ):
        vectors = encoder.encode(TEXTS, batch_size=4)
    assert not encoder.compiled and "InvalidCxxCompiler" in encoder._compiled.failure
    np.testing.assert_allclose(vectors, tiny_encoder.encode(TEXTS, batch_size=4), atol=1e-6)
    assert inductor_config.cpp.cxx != ("/nonexistent/bin/c++",)  # restored for later tests


def test_only_compiler_failures_count_as_failed_compiles():
    from torch._dynamo.exc import InternalTorchDynamoError

    class SoftTimeLimitExceeded(Exception):  # what Celery raises in a task past its limit
        pass

    def chained(cause: BaseException, wrapper: type[Exception]) -> Exception:
        try:
            try:
                raise cause
            except BaseException as exc:
                raise wrapper("wrapped") from exc
        except Exception as wrapped:
            return wrapped

    limit = SoftTimeLimitExceeded()
    assert external_cause(chained(limit, InternalTorchDynamoError)) is limit
    memory = MemoryError()
    assert external_cause(chained(memory, InternalTorchDynamoError)) is memory
    compiler = subprocess.CalledProcessError(1, ["g++"])
    assert external_cause(chained(compiler, InternalTorchDynamoError)) is None
    assert external_cause(InternalTorchDynamoError("no cause")) is None


def test_compile_and_int8_do_not_combine(tiny_model_dir):
    quantized = SentenceEncoder.load(tiny_model_dir, quantize="int8")
    with pytest.raises(ValueError, match="int8-quantized encoder"):
        quantized.compile_for_inference()
    with pytest.raises(ValueError, match="int8-quantized encoder"):
        SentenceEncoder.load(tiny_model_dir, quantize="int8", compile=True)
    compiled = SentenceEncoder.load(tiny_model_dir, compile=True)
    with pytest.raises(ValueError, match="do not combine"):
        compiled.quantize("int8")
