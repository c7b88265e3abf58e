"""The default path: compiled where the host can, warm before traffic, warm across promotions.

The test settings set ``COMPILE: False`` and ``QUERY_RUNTIME: "torch"`` to keep the suite
fast; these tests take them out, so the encoder runs with the defaults a project gets
(``COMPILE="auto"``, ``PRECISION="auto"``, ``QUERY_RUNTIME="auto"``). ``torch_queries`` puts
``QUERY_RUNTIME: "torch"`` back for the tests of torch's single-query graph.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from torch._dynamo.utils import counters

from django_sbert import indexing, serving
from django_sbert.conf import ENCODER_DEFAULTS, encoder_config
from django_sbert.encoder import SentenceEncoder, aot
from django_sbert.encoder.onnx_query import OnnxQueryGraph
from django_sbert.encoder.paths import compiler_available, onnxruntime_missing
from django_sbert.finetuning import promotion
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.query.highlight import best_sentences
from django_sbert.serving import warmup
from tests.encoder.onnx_graphs import MeetingSession, integer_matmuls
from tests.testapp.models import Article

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="no C++ compiler")
needs_onnx = pytest.mark.skipif(
    onnxruntime_missing() is not None, reason=str(onnxruntime_missing())
)


def graphs() -> int:
    """Graphs torch.compile has built in this process (each one is a compile)."""
    return counters["stats"]["unique_graphs"]


@pytest.fixture
def defaults(settings, tmp_path) -> Iterator[Path]:
    """The test encoder with the default COMPILE, PRECISION and QUERY_RUNTIME; MODEL_DIR for
    promotions."""
    encoder = {
        k: v
        for k, v in settings.SBERT["ENCODERS"]["default"].items()
        if k not in ("COMPILE", "QUERY_RUNTIME")
    }
    directory = tmp_path / "models"
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {"default": encoder},
        "MODEL_DIR": str(directory),
        "VERSION_CACHE_SECONDS": 0.1,
    }
    serving.forget_serving()
    serving.reset_encoders()
    warmup.forget_warm_state()
    yield directory
    serving.forget_serving()
    serving.reset_encoders()
    warmup.forget_warm_state()


def stored_tuned_version() -> tuple[SentenceEncoder, str, EncoderVersion]:
    """A fine-tuned version of the default encoder (the same architecture, other weights),
    stored and recorded: the model, its version and its EncoderVersion row."""
    tuned = SentenceEncoder.load(encoder_config("default")["MODEL"])
    with torch.no_grad():
        for parameter in tuned.transformer.parameters():
            parameter.mul_(1.2)
    directory, version = serving.save_encoder(tuned, "default", "tuned")
    target = EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=directory
    )
    return tuned, version, target


@pytest.fixture
def torch_queries(defaults, settings) -> Path:
    """The defaults, with single queries through torch (its compiled single-query graph)."""
    encoder = {**settings.SBERT["ENCODERS"]["default"], "QUERY_RUNTIME": "torch"}
    settings.SBERT = {**settings.SBERT, "ENCODERS": {"default": encoder}}
    serving.reset_encoders()
    return defaults


def test_the_defaults_are_visible_values():
    assert ENCODER_DEFAULTS["COMPILE"] == "auto" and ENCODER_DEFAULTS["PRECISION"] == "auto"
    assert ENCODER_DEFAULTS["QUERY_RUNTIME"] == "auto"


def test_bad_values_are_refused_with_the_choices(settings):
    default = settings.SBERT["ENCODERS"]["default"]
    for key, value, choices in [
        ("COMPILE", "yes", "'auto', True or False"),
        ("PRECISION", "fp16", "'auto', 'float32' or 'bfloat16'"),
        ("QUERY_RUNTIME", "onnx", "'auto', 'torch', 'onnxruntime' or 'onnxruntime-int8'"),
    ]:
        settings.SBERT = {**settings.SBERT, "ENCODERS": {"default": {**default, key: value}}}
        with pytest.raises(ImproperlyConfigured, match=choices):
            encoder_config("default")
    # int8 with the automatic path is fine: it simply runs eager.
    auto = {k: v for k, v in default.items() if k != "COMPILE"}
    settings.SBERT = {**settings.SBERT, "ENCODERS": {"default": {**auto, "QUANTIZE": "int8"}}}
    assert serving.encoder_path("default").label == "eager int8"


@pytest.mark.heavy
@needs_compiler
@pytest.mark.django_db
def test_torch_queries_are_compiled_before_the_first_query(torch_queries):
    torch._dynamo.reset()  # as a fresh process: no graph built yet
    before, built = graphs(), aot.stats["built"]
    state = warmup.warm(["default"], role="query")["default"]
    assert state.error is None
    assert state.path == "compiled float32", state.reason
    assert "single-query" in state.reason
    # Warm-up built the single-query graph ahead of time, into the host's COMPILE_CACHE.
    assert aot.stats["built"] == built + 1 and graphs() == before
    model = serving.get_encoder("default")
    assert model.compiled and model._compiled.active
    assert model._compiled.query_package.parent == torch_queries / ".cache" / ".compiled"
    vector, _ = serving.query_vector("central banks raise interest rates")
    assert graphs() == before and aot.stats["built"] == built + 1  # the query compiled nothing
    eager = SentenceEncoder.load(encoder_config("default")["MODEL"])
    expected = eager.encode("central banks raise interest rates")
    np.testing.assert_allclose(vector, expected, atol=1e-5)


@pytest.mark.heavy
@pytest.mark.django_db
def test_a_web_process_with_default_settings_serves_queries_from_its_first_one(defaults):
    path = serving.encoder_path("default")
    state = warmup.warm(["default"], role="query")["default"]
    assert state.error is None
    model = serving.get_encoder("default")
    query = "central banks raise interest rates"
    eager = SentenceEncoder.load(encoder_config("default")["MODEL"])
    if path.query_runtime == "onnxruntime":
        assert "ONNX Runtime" in state.reason
        graph = model._onnx  # exported and probed by the warm-up, not by the first query
        assert isinstance(graph, OnnxQueryGraph) and graph.transformer is model.transformer
        vector, _ = serving.query_vector(query)
        assert model._onnx is graph  # the query exported nothing
        np.testing.assert_allclose(vector, eager.encode(query), atol=1e-6)
    else:  # an AMX CPU: torch's graph serves the queries
        assert "single queries through torch" in state.reason and model._onnx is None


def ask_for_query_runtime(settings, runtime: str) -> None:
    """The default encoder's settings with ``QUERY_RUNTIME`` set, its model loaded afresh."""
    default = settings.SBERT["ENCODERS"]["default"]
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {"default": {**default, "QUERY_RUNTIME": runtime}},
    }
    serving.reset_encoders()


@pytest.mark.heavy
@needs_onnx
@pytest.mark.django_db
def test_int8_queries_are_served_where_the_settings_ask_and_said_so(defaults, settings):
    ask_for_query_runtime(settings, "onnxruntime-int8")
    path = serving.encoder_path("default")
    assert path.query_label == "onnxruntime int8" and "int8 weights" in path.reason
    state = warmup.warm(["default"], role="query")["default"]
    assert state.error is None
    model = serving.get_encoder("default")
    graph = model._onnx  # built by the warm-up
    assert isinstance(graph, OnnxQueryGraph) and graph.int8
    assert graph.path.name.startswith("onnx-query-int8-")
    query = "central banks raise interest rates"
    vector, _ = serving.query_vector(query)
    expected = SentenceEncoder.load(encoder_config("default")["MODEL"]).encode(query)
    # int8's own vector, close to float32's (on a VNNI host the tiny model's lands within 1e-4)
    assert float(vector @ expected) > 0.97 and not np.array_equal(vector, expected)
    assert integer_matmuls(graph.path) > 0
    # Evaluation encodes what a visitor's search encodes: the same vector, bit for bit.
    serving.clear_query_cache()
    (evaluated,) = serving.encode_texts([query], role="query")
    np.testing.assert_array_equal(evaluated, vector)


@pytest.mark.heavy
@needs_onnx
@pytest.mark.django_db
def test_a_promoted_version_gets_its_own_onnx_graph(defaults, settings):
    ask_for_query_runtime(settings, "onnxruntime")
    Article.objects.bulk_create(Article(title=f"story {i}", body="rates") for i in range(3))
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    query = "central banks raise interest rates"
    base, _ = serving.query_vector(query)
    tuned, version, target = stored_tuned_version()
    promotion.start_promotion(target, gate=False, run_now=True)
    serving.forget_serving()
    vector, served = serving.query_vector(query)
    assert served == version
    model = serving.get_encoder("default")
    assert isinstance(model._onnx, OnnxQueryGraph)  # exported from the new weights
    np.testing.assert_allclose(vector, tuned.encode(query), atol=1e-6)
    assert not np.allclose(vector, base, atol=1e-3)


SENTENCES = ["Central banks raise interest rates.", "The cup final went to penalties."]


@pytest.mark.heavy
@needs_compiler
@pytest.mark.django_db
def test_a_web_process_encodes_a_pages_sentences_without_compiling(torch_queries):
    """A process warmed for queries (a web process) encodes its batches (a search page's
    highlighted sentences) in eager mode: no request waits for a batch graph."""
    torch._dynamo.reset()  # as a fresh process: no graph built yet
    warmup.warm(["default"], role="query")
    before = graphs()
    (mark,) = best_sentences("interest rates", [" ".join(SENTENCES)])  # a page's highlights
    vectors = serving.encode_texts(SENTENCES, role="document")
    assert mark is not None and graphs() == before  # no batch graph was built
    eager = SentenceEncoder.load(encoder_config("default")["MODEL"])
    np.testing.assert_allclose(vectors, eager.encode(SENTENCES), atol=1e-6)
    # A process warmed for documents (a worker, the query server) compiles its batch graph.
    warmup.warm(["default"], role="both")
    assert graphs() == before + 1
    serving.encode_texts(SENTENCES, role="document")
    assert graphs() == before + 1


@pytest.mark.heavy
@needs_compiler
@pytest.mark.django_db
def test_a_promotion_is_served_without_a_recompile(torch_queries, tmp_path):
    Article.objects.bulk_create(Article(title=f"story {i}", body="rates") for i in range(5))
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    state = warmup.warm(["default"], role="both")["default"]
    assert state.path == "compiled float32" and state.error is None
    base_version = state.version
    serving.query_vector("warm the query path")

    _, version, target = stored_tuned_version()
    directory = target.directory
    before, built = graphs(), aot.stats["built"]
    promotion.start_promotion(target, gate=False, run_now=True)  # re-encodes every row
    target.refresh_from_db()
    assert target.status == VersionStatus.ACTIVE
    # The promotion's batches froze the new weights into one batch graph (a worker's cost).
    assert graphs() == before + 1
    serving.forget_serving()
    vector, served = serving.query_vector("central banks raise interest rates")
    assert served == version != base_version
    # The first query of the new version compiled nothing: the package on disk serves it.
    assert graphs() == before + 1 and aot.stats["built"] == built
    assert serving.get_encoder("default").compiled
    eager = SentenceEncoder.load(serving.resolve_directory(directory))
    np.testing.assert_allclose(
        vector, eager.encode("central banks raise interest rates"), atol=1e-5
    )


@pytest.mark.heavy
@pytest.mark.django_db
def test_sbert_status_says_which_path_and_why(defaults, settings):
    out = io.StringIO()
    call_command("sbert_status", "--no-progress", stdout=out)
    text = out.getvalue()
    expected = serving.path_report("default")
    assert f"encoder 'default': {expected['path']} ({expected['reason']})" in text
    assert expected["cpu"] in text
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {"default": {**settings.SBERT["ENCODERS"]["default"], "COMPILE": False}},
    }
    out = io.StringIO()
    call_command("sbert_status", "--no-progress", stdout=out)
    assert "encoder 'default': eager float32 (" in out.getvalue()
    assert "COMPILE=False" in out.getvalue()


@pytest.mark.heavy
@needs_onnx
@pytest.mark.django_db
def test_queries_on_an_onnx_graph_are_encoded_side_by_side(defaults, settings):
    """Two searches' queries run inside the ONNX Runtime session at the same moment (no
    encoder lock: two cores for two queries), and each gets, bit for bit, the vector the
    text gets alone on one thread, whatever the process's torch thread count."""
    ask_for_query_runtime(settings, "onnxruntime")
    assert warmup.warm(["default"], role="query")["default"].error is None
    model = serving.get_encoder("default")
    graph = model._onnx
    assert isinstance(graph, OnnxQueryGraph)
    texts = ["central banks raise interest rates", "the dog runs " * 40]  # 7 and 120 tokens
    prompt = serving.role_prompt("default", "query", model)
    alone = [model.encode([text], alone=True, threads=1, prompt=prompt)[0] for text in texts]
    graph._session = MeetingSession(graph._session, parties=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(4)  # the query server's torch threads on a larger host
    results: dict[int, np.ndarray] = {}
    try:

        def search(index: int) -> None:
            (results[index],) = serving.encode_texts([texts[index]], role="query")

        workers = [threading.Thread(target=search, args=(i,)) for i in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert torch.get_num_threads() == 4  # no query set it behind the process's back
    finally:
        torch.set_num_threads(threads)
    assert graph._session.calls == 2 and not graph._session.barrier.broken
    for index, vector in enumerate(alone):
        np.testing.assert_array_equal(results[index], vector)
