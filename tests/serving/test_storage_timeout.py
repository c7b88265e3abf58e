"""Each storage call of a fetch runs under ``model_cache.STORAGE_TIMEOUT``.

A storage endpoint that stops answering used to hang the fetch (and, in every process of the
host, the search that needed the version) for as long as it hung. The storage here is a real
``FileSystemStorage`` whose ``_open`` sleeps for 3 s.
"""

from __future__ import annotations

import time

import pytest
from django.core.files.storage import FileSystemStorage

from django_sbert import serving
from django_sbert.exceptions import VersionUnavailable
from django_sbert.serving import model_cache
from django_sbert.serving.model_cache import cached_path, local_directory
from tests.serving.failing_storage import SleepingStorage, use_storage


def test_a_storage_that_hangs_past_the_timeout_makes_the_version_unavailable(
    settings, tmp_path, tiny_encoder, monkeypatch
):
    location = tmp_path / "store"
    use_storage(settings, location, FileSystemStorage, tmp_path / "trainer-cache")
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    use_storage(settings, location, SleepingStorage, tmp_path / "host-cache", delay=3.0)
    monkeypatch.setattr(model_cache, "STORAGE_TIMEOUT", 0.5)

    started = time.monotonic()
    with pytest.raises(VersionUnavailable, match="STORAGE_TIMEOUT") as info:
        local_directory("default", version, key)
    assert time.monotonic() - started < 2.0
    assert version in str(info.value) and "did not answer within" in str(info.value)
    assert not cached_path(key).exists()
    serving.reset_encoders()
