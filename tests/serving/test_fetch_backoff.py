"""A failed fetch is remembered: a corrupt active version is downloaded once per back-off.

Without it every search, task and watcher tick copied and hashed the whole model again. The
storage is a real ``FileSystemStorage`` that counts the files it opens.
"""

from __future__ import annotations

import pytest

from django_sbert import serving
from django_sbert.exceptions import VersionUnavailable
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.serving import health, model_cache
from django_sbert.serving.model_cache import fetch_failures
from tests.serving.failing_storage import MeteredStorage, use_storage


@pytest.fixture
def corrupt_active_version(settings, tmp_path, tiny_encoder, db):
    location = tmp_path / "store"
    use_storage(settings, location, MeteredStorage, tmp_path / "host-cache")
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=key, status=VersionStatus.ACTIVE
    )
    weights = location / key / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    weights.write_bytes(bytes(data))
    MeteredStorage.reset()
    yield key, version
    serving.reset_encoders()
    serving.forget_serving()


def test_three_searches_against_a_corrupt_version_fetch_it_once(corrupt_active_version):
    key, version = corrupt_active_version
    for _ in range(3):
        with pytest.raises(VersionUnavailable, match="sha256"):
            serving.query_vector("central bank")
    assert MeteredStorage.opened[f"{key}/manifest.json"] == 1
    assert MeteredStorage.opened[f"{key}/model.safetensors"] == 1

    # Visible to the health report: which version, why, and when it is tried again.
    [failure] = fetch_failures()
    assert failure["version"] == version and failure["failures"] == 1
    assert "sha256" in failure["error"] and 0 < failure["retry_in"] <= 60
    [reported] = health.check(names=[]).as_dict()["fetch_failures"]  # staff-only details
    assert reported["version"] == version and reported["failures"] == 1


def test_without_a_back_off_every_use_tries_again(corrupt_active_version, monkeypatch):
    key, _ = corrupt_active_version
    monkeypatch.setattr(model_cache, "FETCH_BACKOFF", 0.0)
    for _ in range(3):
        with pytest.raises(VersionUnavailable):
            serving.query_vector("central bank")
    assert MeteredStorage.opened[f"{key}/manifest.json"] == 3
    assert fetch_failures()[0]["failures"] == 3
