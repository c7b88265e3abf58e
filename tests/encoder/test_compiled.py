"""encode() through torch.compile: the same vectors as eager mode, never a new way to fail."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from django_sbert.encoder import SentenceEncoder

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
    batches = compiled_tiny.encode(TEXTS, batch_size=4)  # batches of 4 and 2: one graph
    assert compiled_tiny._compiled is not None and compiled_tiny._compiled.active
    np.testing.assert_allclose(batches, tiny_encoder.encode(TEXTS, batch_size=4), atol=1e-5)
    single = compiled_tiny.encode(TEXTS[0])  # a single text: its own graph
    np.testing.assert_allclose(single, tiny_encoder.encode(TEXTS[0]), atol=1e-5)
    assert compiled_tiny.compiled


def test_training_copies_and_pickles_use_the_eager_module(compiled_tiny, tiny_encoder):
    clone = compiled_tiny.copy()
    assert not clone.compiled and clone._compiled is None
    assert not pickle.loads(pickle.dumps(compiled_tiny)).compiled
    # Gradients flow: outside inference mode the eager transformer runs.
    compiled_tiny.train()
    try:
        compiled_tiny(compiled_tiny.tokenize(TEXTS[:3])).sum().backward()
        grads = [p.grad for p in compiled_tiny.transformer.parameters()]
        assert any(g is not None and g.abs().sum() > 0 for g in grads)
    finally:
        compiled_tiny.zero_grad(set_to_none=True)
        compiled_tiny.eval()


def test_moving_the_model_drops_the_frozen_graph(tiny_model_dir):
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True)
    with torch.inference_mode():
        assert encoder._inference_transformer() is encoder._compiled
    encoder.to("cpu")
    assert encoder._compiled is None and encoder.compiled  # rebuilt on the next encode


def test_a_failed_compile_warns_once_and_falls_back_to_eager(
    tiny_model_dir, tiny_encoder, monkeypatch
):
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    # No C++ compiler, and no cached graph that would make one unnecessary.
    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/bin/c++",))
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    monkeypatch.setattr(functorch_config, "enable_autograd_cache", False)
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True)
    with pytest.warns(RuntimeWarning, match="torch.compile failed.*eager mode"):
        vectors = encoder.encode(TEXTS, batch_size=4)
    assert not encoder.compiled and "Error" in encoder._compiled.failure
    np.testing.assert_allclose(vectors, tiny_encoder.encode(TEXTS, batch_size=4), atol=1e-6)


def test_compile_refuses_a_quantized_encoder(tiny_model_dir):
    encoder = SentenceEncoder.load(tiny_model_dir, quantize="int8")
    with pytest.raises(ValueError, match="int8-quantized encoder"):
        encoder.compile()
    with pytest.raises(ValueError, match="int8-quantized encoder"):
        SentenceEncoder.load(tiny_model_dir, quantize="int8", compile=True)
