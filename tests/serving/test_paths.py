"""The default path: compiled where the host can, warm before traffic, warm across promotions.

The test settings set ``COMPILE: False`` to keep the suite fast; these tests take it out, so
the encoder runs with the defaults a project gets (``COMPILE="auto"``, ``PRECISION="auto"``).
"""

from __future__ import annotations

import io
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
from django_sbert.encoder.paths import compiler_available
from django_sbert.finetuning import promotion
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.serving import warmup
from tests.testapp.models import Article

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="no C++ compiler")


def graphs() -> int:
    """Graphs torch.compile has built in this process (each one is a compile)."""
    return counters["stats"]["unique_graphs"]


@pytest.fixture
def defaults(settings, tmp_path) -> Iterator[Path]:
    """The test encoder with the default COMPILE and PRECISION; MODEL_DIR for promotions."""
    encoder = {k: v for k, v in settings.SBERT["ENCODERS"]["default"].items() if k != "COMPILE"}
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


def test_the_defaults_are_visible_values():
    assert ENCODER_DEFAULTS["COMPILE"] == "auto" and ENCODER_DEFAULTS["PRECISION"] == "auto"


def test_bad_values_are_refused_with_the_choices(settings):
    default = settings.SBERT["ENCODERS"]["default"]
    for key, value, choices in [
        ("COMPILE", "yes", "'auto', True or False"),
        ("PRECISION", "fp16", "'auto', 'float32' or 'bfloat16'"),
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
def test_a_web_process_with_default_settings_is_compiled_before_its_first_query(defaults):
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
    assert model._compiled.query_package.parent == defaults / ".cache" / ".compiled"
    vector, _ = serving.query_vector("central banks raise interest rates")
    assert graphs() == before and aot.stats["built"] == built + 1  # the query compiled nothing
    eager = SentenceEncoder.load(encoder_config("default")["MODEL"])
    expected = eager.encode("central banks raise interest rates")
    np.testing.assert_allclose(vector, expected, atol=1e-5)


@pytest.mark.heavy
@needs_compiler
@pytest.mark.django_db
def test_a_promotion_is_served_without_a_recompile(defaults, tmp_path):
    Article.objects.bulk_create(Article(title=f"story {i}", body="rates") for i in range(5))
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    state = warmup.warm(["default"], role="both")["default"]
    assert state.path == "compiled float32" and state.error is None
    base_version = state.version
    serving.query_vector("warm the query path")

    # A fine-tuned version: the same architecture, other weights.
    tuned = SentenceEncoder.load(encoder_config("default")["MODEL"])
    with torch.no_grad():
        for parameter in tuned.transformer.parameters():
            parameter.mul_(1.2)
    directory, version = serving.save_encoder(tuned, "default", "tuned")
    target = EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=directory
    )
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
