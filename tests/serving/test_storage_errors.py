"""Whatever the model storage raises, a version it cannot deliver is unavailable: 503, E012.

botocore's ``ClientError``, ``EndpointConnectionError`` and ``NoCredentialsError`` are not
``OSError``; a storage backend raising one from ``exists()`` or ``open()`` must give
``VersionUnavailable`` (the API's 503, check E012, an unhealthy ``sbert_health``), never a
traceback. The storage here is a real ``FileSystemStorage`` that raises such an exception.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from django_sbert import serving
from django_sbert.api import registry
from django_sbert.checks import check_local_files
from django_sbert.exceptions import VersionUnavailable
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.serving.model_cache import local_directory
from tests.serving.failing_storage import RaisingStorage, use_storage
from tests.testapp.models import Article


@pytest.fixture
def saved(settings, tmp_path, tiny_encoder):
    """A version saved through a working storage; returns (key, version, location)."""
    from django.core.files.storage import FileSystemStorage

    location = tmp_path / "store"
    use_storage(settings, location, FileSystemStorage, tmp_path / "trainer-cache")
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    yield key, version, location
    serving.reset_encoders()
    serving.forget_serving()


@pytest.mark.parametrize("fail", ["exists", "open"])
def test_a_storage_error_that_is_not_an_oserror_makes_the_version_unavailable(
    saved, settings, tmp_path, fail
):
    key, version, location = saved
    use_storage(settings, location, RaisingStorage, tmp_path / "host-cache", fail=fail)

    with pytest.raises(VersionUnavailable) as info:
        local_directory("default", version, key)
    message = str(info.value)
    assert version in message and "StorageClientError" in message
    assert "RaisingStorage" in message
    assert not list((tmp_path / "host-cache").glob(".tmp-*"))


@pytest.fixture
def active_on_a_failing_storage(saved, settings, tmp_path, db):
    key, version, location = saved
    EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=key, status=VersionStatus.ACTIVE
    )
    use_storage(settings, location, RaisingStorage, tmp_path / "host-cache", fail="open")
    return version


def test_the_start_up_check_reports_E012_instead_of_crashing(active_on_a_failing_storage):
    errors = check_local_files(databases=["default"])
    assert [e.id for e in errors] == ["django_sbert.E012"]
    assert active_on_a_failing_storage in errors[0].msg and "StorageClientError" in errors[0].msg


def test_sbert_health_reports_the_version_unavailable_instead_of_crashing(
    active_on_a_failing_storage,
):
    with pytest.raises(CommandError) as info:
        call_command("sbert_health", stdout=io.StringIO())
    report = json.loads(str(info.value))
    assert report["status"] == "unavailable"
    assert "StorageClientError" in report["checks"]["encoder:default"]


@pytest.mark.urls("tests.api.urls")
def test_a_search_answers_503_not_500(active_on_a_failing_storage):
    saved_entries = dict(registry._entries)
    registry.clear()
    registry.register(Article, fields=["id", "title"])
    try:
        client = APIClient(raise_request_exception=False)
        response = client.get("/api/sbert/search/", {"model": "testapp.article", "q": "bank"})
    finally:
        registry.clear()
        registry._entries.update(saved_entries)
    assert response.status_code == 503, response.content
