"""Single queries through ONNX Runtime: float32 vectors equal to eager ones, each set of weights
exported once, and torch again (with one warning) whenever ONNX Runtime cannot serve."""

from __future__ import annotations

import logging
import pickle
import warnings

import numpy as np
import pytest
import torch

from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.onnx_query import OnnxQueryGraph
from django_sbert.encoder.paths import onnxruntime_missing
from tests.encoder.onnx_graphs import integer_matmuls
from tests.encoder.tiny_families import FAMILIES, build_family

pytestmark = [
    pytest.mark.heavy,  # every test exports a model
    # Without the onnx extra (nox -s without_onnx): tests/serving/test_without_onnx.py instead.
    pytest.mark.skipif(onnxruntime_missing() is not None, reason=str(onnxruntime_missing())),
]

TEXTS = [
    "A plane is taking off.",
    "",  # [CLS] [SEP]: the shortest input
    "x",
    "Central banks raised interest rates again. " * 40,  # past max_seq_length: truncated
    "Three dogs run across a snowy field near the river.",
]


@pytest.fixture
def onnx_tiny(tiny_model_dir):
    return SentenceEncoder.load(tiny_model_dir, query_runtime="onnxruntime")


def one_at_a_time(encoder: SentenceEncoder, texts: list[str]) -> np.ndarray:
    return np.stack([encoder.encode(text) for text in texts])


def test_single_texts_equal_eager_float32_and_batches_stay_on_torch(onnx_tiny, tiny_encoder):
    expected = tiny_encoder.encode(TEXTS)
    np.testing.assert_allclose(one_at_a_time(onnx_tiny, TEXTS), expected, atol=1e-6)
    graph = onnx_tiny._onnx
    assert isinstance(graph, OnnxQueryGraph) and onnx_tiny.query_runtime_failure is None
    np.testing.assert_allclose(onnx_tiny.encode(TEXTS), expected, atol=1e-6)  # a batch
    one_at_a_time(onnx_tiny, TEXTS[:2])
    assert onnx_tiny._onnx is graph  # exported once, not per text


def test_a_bfloat16_encoder_still_answers_queries_in_float32(tiny_model_dir, tiny_encoder):
    encoder = SentenceEncoder.load(tiny_model_dir, dtype="bfloat16", query_runtime="onnxruntime")
    assert next(encoder.transformer.parameters()).dtype == torch.bfloat16
    expected = tiny_encoder.encode(TEXTS)
    # Exported from the float32 weights kept until then, not from their bf16 rounding.
    np.testing.assert_allclose(one_at_a_time(encoder, TEXTS), expected, atol=1e-6)
    assert encoder._onnx_source == []  # released once exported
    batch = encoder.encode(TEXTS)  # bf16 arithmetic: close, not equal
    assert 1e-5 < np.abs(batch - expected).max() < 5e-2


def test_new_weights_are_exported_again(onnx_tiny, tiny_model_dir):
    before = onnx_tiny.encode(TEXTS[0])
    other = SentenceEncoder.load(tiny_model_dir)
    with torch.no_grad():
        for parameter in other.transformer.parameters():
            parameter.mul_(1.3)
    onnx_tiny.load_state_dict(other.state_dict())
    after = onnx_tiny.encode(TEXTS[0])
    np.testing.assert_allclose(after, other.encode(TEXTS[0]), atol=1e-6)
    assert not np.allclose(after, before, atol=1e-3)
    # Weights replaced rather than loaded (a cast, a swap): seen on the next query too.
    onnx_tiny.transformer.embeddings.word_embeddings.weight = torch.nn.Parameter(
        other.transformer.embeddings.word_embeddings.weight.detach() * 0.5
    )
    graph = onnx_tiny._onnx
    onnx_tiny.encode(TEXTS[0])
    assert onnx_tiny._onnx is not graph


def test_training_in_place_is_seen_by_the_next_query(onnx_tiny):
    onnx_tiny.encode(TEXTS[0])
    onnx_tiny.train()
    with torch.no_grad():
        onnx_tiny.transformer.encoder.layer[0].output.dense.bias.add_(0.5)
    onnx_tiny.eval()
    eager = pickle.loads(pickle.dumps(onnx_tiny))  # copies run torch
    np.testing.assert_allclose(onnx_tiny.encode(TEXTS[0]), eager.encode(TEXTS[0]), atol=1e-6)


def test_copies_run_torch_until_asked(onnx_tiny, tiny_encoder):
    onnx_tiny.encode(TEXTS[0])
    # fit() trains a copy: its changing weights must never be exported at each evaluation.
    copy = pickle.loads(pickle.dumps(onnx_tiny))
    assert copy._onnx is None and copy.query_runtime == "torch"
    np.testing.assert_allclose(copy.encode(TEXTS[2]), tiny_encoder.encode(TEXTS[2]), atol=1e-6)
    assert copy._onnx is None
    copy.set_query_runtime("onnxruntime")
    copy.encode(TEXTS[2])
    assert isinstance(copy._onnx, OnnxQueryGraph) and copy._onnx is not onnx_tiny._onnx


def test_only_a_text_encoded_on_its_own_takes_onnxruntime(tiny_model_dir, monkeypatch):
    encoder = SentenceEncoder.load(tiny_model_dir, query_runtime="onnxruntime")
    # 33 texts in batches of 32: the last batch holds one text, and stays on torch.
    encoder.encode([f"text number {i}" for i in range(33)], batch_size=32)
    assert encoder._onnx is None
    encoder.encode(["one text in a list"])
    assert isinstance(encoder._onnx, OnnxQueryGraph)


def test_an_export_that_fails_leaves_torch_serving_with_one_warning(
    onnx_tiny, tiny_encoder, monkeypatch
):
    def refuse(*args, **kwargs):
        raise RuntimeError("this architecture cannot be exported")

    monkeypatch.setattr(torch.onnx, "export", refuse)
    with pytest.warns(RuntimeWarning, match="ONNX Runtime cannot encode this model's queries"):
        first = onnx_tiny.encode(TEXTS[0])
    assert "cannot be exported" in onnx_tiny.query_runtime_failure
    np.testing.assert_allclose(first, tiny_encoder.encode(TEXTS[0]), atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tried once: later queries neither retry nor warn
        onnx_tiny.encode(TEXTS[1])


def test_only_float_cpu_encoders_and_known_runtimes_are_accepted(tiny_model_dir):
    with pytest.raises(ValueError, match="'torch', 'onnxruntime' or 'onnxruntime-int8'"):
        SentenceEncoder.load(tiny_model_dir, query_runtime="onnx")
    with pytest.raises(ValueError, match="int8-quantized"):
        SentenceEncoder.load(tiny_model_dir, quantize="int8", query_runtime="onnxruntime")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_is_served_by_onnxruntime(tmp_path, family):
    directory = build_family(family, tmp_path / family)
    eager = SentenceEncoder.load(directory)
    encoder = SentenceEncoder.load(directory, query_runtime="onnxruntime")
    texts = [t for t in TEXTS if t]  # prompts and pooling modes of every family, long texts too
    got = one_at_a_time(encoder, texts)
    assert encoder.query_runtime_failure is None, encoder.query_runtime_failure
    np.testing.assert_allclose(got, eager.encode(texts), atol=1e-5)


def test_the_graph_is_stored_once_per_set_of_weights_and_loaded_after(
    tiny_model_dir, tiny_encoder, tmp_path, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger="django_sbert.encoder")
    first = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=tmp_path
    )
    first.encode(TEXTS[0])
    assert "Exported the query graph" in caplog.text
    stored = first._onnx.path
    assert stored is not None and stored.parent == tmp_path and stored.name.startswith("onnx-")
    assert list(tmp_path.glob(".building-*")) == []  # written whole, renamed into place

    # Another process of the host: loads the file, exports nothing.
    def refuse(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(torch.onnx, "export", refuse)
    second = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=tmp_path
    )
    np.testing.assert_allclose(one_at_a_time(second, TEXTS), tiny_encoder.encode(TEXTS), atol=1e-6)
    assert second._onnx.path == stored and second.query_runtime_failure is None
    # A server's log says the process had its graph (tests/example/test_demo.py reads it).
    assert f"Loaded the query graph {stored.name}" in caplog.text
    monkeypatch.undo()

    # Other weights (a fine-tuned version): their own entry.
    tuned = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=tmp_path
    )
    with torch.no_grad():
        tuned.transformer.encoder.layer[0].output.dense.bias.add_(0.5)
    tuned.encode(TEXTS[0])
    assert tuned._onnx.path != stored and len(list(tmp_path.glob("onnx-query-*.onnx"))) == 2


def test_a_damaged_stored_graph_is_exported_again_with_a_warning(
    tiny_model_dir, tiny_encoder, tmp_path
):
    first = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=tmp_path
    )
    first.encode(TEXTS[0])
    stored = first._onnx.path
    stored.write_bytes(stored.read_bytes()[:1000])  # a truncated file
    again = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=tmp_path
    )
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        vector = again.encode(TEXTS[0])
    np.testing.assert_allclose(vector, tiny_encoder.encode(TEXTS[0]), atol=1e-6)
    assert again.query_runtime_failure is None and stored.stat().st_size > 1000


def test_a_cache_it_cannot_write_only_costs_the_export(tiny_model_dir, tiny_encoder, tmp_path):
    blocked = tmp_path / "a-file-not-a-folder"
    blocked.write_text("")
    encoder = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=blocked / "cache"
    )
    np.testing.assert_allclose(encoder.encode(TEXTS[0]), tiny_encoder.encode(TEXTS[0]), atol=1e-6)
    assert isinstance(encoder._onnx, OnnxQueryGraph) and encoder._onnx.path is None


# ---------------------------------------------------------------- int8 weights


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_int8_queries_are_close_to_float32_and_stored_apart_from_its_graph(
    tiny_model_dir, tiny_encoder, tmp_path, caplog
):
    float32 = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime", compile_cache=tmp_path
    )
    int8 = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime-int8", compile_cache=tmp_path
    )
    texts = [t for t in TEXTS if t]
    expected = one_at_a_time(float32, texts)
    got = one_at_a_time(int8, texts)
    assert int8._onnx.int8 and int8.query_runtime_failure is None
    assert cosines(got, expected).min() > 0.97
    # int8 arithmetic ran, not the float graph (how far it lands from float32 depends on the
    # CPU's int8 kernels: 1e-4 at most on a VNNI host with this tiny model)
    assert integer_matmuls(int8._onnx.path) > 0 and integer_matmuls(float32._onnx.path) == 0
    assert not np.array_equal(got, expected)
    # Its own stored file beside the float32 one, found again by the host's next process.
    assert int8._onnx.path.name.startswith("onnx-query-int8-")
    assert float32._onnx.path != int8._onnx.path
    caplog.set_level(logging.INFO, logger="django_sbert.encoder")
    again = SentenceEncoder.load(
        tiny_model_dir, query_runtime="onnxruntime-int8", compile_cache=tmp_path
    )
    np.testing.assert_array_equal(one_at_a_time(again, texts), got)
    assert again._onnx.path == int8._onnx.path
    assert f"Loaded the query graph {int8._onnx.path.name}" in caplog.text  # not re-exported
    # Batches stay on torch's float32 path.
    np.testing.assert_allclose(int8.encode(texts), tiny_encoder.encode(texts), atol=1e-6)


def test_the_real_model_in_int8_keeps_its_queries_close_to_float32(minilm):
    int8 = SentenceEncoder.load("all-MiniLM-L6-v2", query_runtime="onnxruntime-int8")
    claims = [
        "0-dimensional biomaterials show inductive properties.",
        "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
        "Aspirin inhibits the production of PGE2.",
        "Birth-weight is positively associated with breast cancer.",
    ]
    got = one_at_a_time(int8, claims)
    assert cosines(got, minilm.encode(claims)).min() > 0.98
    # Each text alone, in any list: the same text, the same vector.
    np.testing.assert_array_equal(int8.encode(claims[::-1], alone=True), got[::-1])


def test_an_int8_graph_too_far_from_the_model_is_refused_and_torch_serves(
    tiny_model_dir, tiny_encoder, monkeypatch
):
    from django_sbert.encoder import onnx_query

    monkeypatch.setattr(onnx_query, "INT8_PROBE_COSINE", 1.0 + 1e-6)  # nothing reaches it
    encoder = SentenceEncoder.load(tiny_model_dir, query_runtime="onnxruntime-int8")
    with pytest.warns(RuntimeWarning, match="int8 output is too far"):
        vector = encoder.encode(TEXTS[0])
    np.testing.assert_allclose(vector, tiny_encoder.encode(TEXTS[0]), atol=1e-6)
    assert "too far" in encoder.query_runtime_failure


def test_quantizing_leaves_the_process_logging_as_it_was(tiny_model_dir, monkeypatch, capfd):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # a process that configured no logging
    level, filters = root.level, list(root.filters)
    encoder = SentenceEncoder.load(tiny_model_dir, query_runtime="onnxruntime-int8")
    encoder.encode(TEXTS[0])
    assert isinstance(encoder._onnx, OnnxQueryGraph) and encoder._onnx.int8
    # The quantizer's root-logger advice neither printed nor installed a handler for good.
    assert root.handlers == [] and root.level == level and root.filters == filters
    assert "pre-processing" not in capfd.readouterr().err


def test_a_runtime_switched_to_int8_gets_an_int8_graph(onnx_tiny):
    onnx_tiny.encode(TEXTS[0])
    float32 = onnx_tiny._onnx
    assert not float32.int8
    onnx_tiny.query_runtime = "onnxruntime-int8"  # as if switched while that graph was built
    onnx_tiny.encode(TEXTS[0])
    assert onnx_tiny._onnx is not float32 and onnx_tiny._onnx.int8
