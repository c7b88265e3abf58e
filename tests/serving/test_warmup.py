"""serving.warmup: a process loads and runs its serving encoders before traffic, and says so."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_sbert.serving import warmup
from django_sbert.serving.cache import get_encoder, reset_encoders


@pytest.fixture(autouse=True)
def _fresh():
    reset_encoders()
    warmup.forget_warm_state()
    yield
    warmup.forget_warm_state()


@pytest.mark.django_db
def test_warm_loads_the_serving_version_and_records_it():
    states = warmup.warm(["default"], role="both")
    state = states["default"]
    assert state.error is None
    assert state.version  # the serving version string
    assert warmup.warm_state()["default"] == state
    # Loaded: the same encoder object is now returned without loading again.
    assert get_encoder("default") is get_encoder("default")


@pytest.mark.django_db
def test_a_broken_encoder_is_reported_not_raised():
    encoders = {"default": {"MODEL": "/nonexistent/model/dir"}}
    with override_settings(SBERT={"ENCODERS": encoders}):
        state = warmup.warm(["default"], role="query")["default"]
    assert state.error is not None
    assert "nonexistent" in state.error
    assert warmup.warm_state()["default"].error == state.error
