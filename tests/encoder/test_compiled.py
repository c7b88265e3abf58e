"""encode() through torch.compile: the same vectors as eager mode, never a new way to fail."""

from __future__ import annotations

import pickle
import subprocess

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.compiled import external_cause

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


def test_compiled_vectors_equal_eager_ones(compiled_tiny, tiny_encoder):
    assert compiled_tiny.compiled and compiled_tiny._compiled is None  # built on first use
    graphs = counters["stats"]["unique_graphs"]
    batches = compiled_tiny.encode(TEXTS, batch_size=4)  # batches of 4 and 2: one graph
    assert counters["stats"]["unique_graphs"] == graphs + 1  # really compiled, in one piece
    assert not counters["graph_break"]
    assert compiled_tiny._compiled is not None and compiled_tiny._compiled.active
    np.testing.assert_allclose(batches, tiny_encoder.encode(TEXTS, batch_size=4), atol=1e-5)
    single = compiled_tiny.encode(TEXTS[0])  # a single text: its own graph
    assert counters["stats"]["unique_graphs"] == graphs + 2
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


def test_moving_the_model_drops_the_frozen_graph(compiled_tiny):
    with torch.inference_mode():
        assert compiled_tiny._inference_transformer() is compiled_tiny._compiled
    compiled_tiny.to("cpu")
    assert compiled_tiny._compiled is None and compiled_tiny.compiled  # rebuilt on next encode


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
