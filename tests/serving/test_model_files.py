"""A host without the serving version's files refuses to encode; it never falls back.

The database says which version serves. A web host or worker whose model storage lacks that
version's files (an unmounted volume, the wrong storage) must not encode with the
settings' model instead: its sweep would overwrite promoted vectors with base ones, and its text
searches would find nothing. "Another host" here is this process (or a worker subprocess) with
``MODEL_DIR`` (the default model storage, and the default cache under it) pointed at an empty
directory.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_sbert import indexing, serving
from django_sbert.checks import check_local_files
from django_sbert.exceptions import VersionUnavailable
from django_sbert.finetuning import promotion
from django_sbert.indexing.tasks import enqueue_embed
from django_sbert.models import EncoderVersion, VersionStatus
from tests.celery_app import app
from tests.testapp.models import Article
from tests.worker_process import Worker

TITLES = ["central bank raises rates", "football team wins", "storm closes schools"]


@pytest.fixture
def model_dir(settings, tmp_path) -> Iterator[Path]:
    """This test's MODEL_DIR, and a version cache short enough for a promotion's wait."""
    directory = tmp_path / "models"
    settings.SBERT = {**settings.SBERT, "MODEL_DIR": str(directory), "VERSION_CACHE_SECONDS": 0.1}
    serving.forget_serving()
    serving.reset_encoders()
    yield directory
    serving.forget_serving()
    serving.reset_encoders()


def promote_a_version() -> EncoderVersion:
    """Articles embedded with the base model, then a saved version promoted over them."""
    Article.objects.bulk_create(Article(title=t, body="story") for t in TITLES)
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_stale(ref)
    directory, version = serving.save_encoder(serving.get_encoder("default"), "default", "tiny")
    target = EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=directory
    )
    promotion.start_promotion(target, gate=False, run_now=True)
    target.refresh_from_db()
    assert target.status == VersionStatus.ACTIVE
    return target


def become_a_host_without_the_files(settings, tmp_path: Path) -> Path:
    elsewhere = tmp_path / "other-host-models"
    elsewhere.mkdir()
    settings.SBERT = {**settings.SBERT, "MODEL_DIR": str(elsewhere)}
    serving.forget_serving()
    serving.reset_encoders()
    return elsewhere


@pytest.mark.django_db
def test_a_host_without_the_files_serves_the_database_version_and_refuses_to_encode(
    model_dir, settings, tmp_path
):
    target = promote_a_version()
    elsewhere = become_a_host_without_the_files(settings, tmp_path)

    # The database's answer, not the base model's version, whatever this host has on disk.
    assert serving.serving_record("default").version == target.version
    with pytest.raises(VersionUnavailable) as info:
        list(Article.objects.similar_to("central bank"))
    message = str(info.value)
    assert target.version in message
    # ... and the storage it looked in, and what it lacked there.
    assert str(elsewhere) in message and f"{target.directory}/manifest.json" in message
    with pytest.raises(VersionUnavailable):
        serving.encode_texts(["storm"])
    # Searches that need no encoding still work, on the promoted rows.
    stored = Article.objects.get(title=TITLES[0]).embedding
    found = list(Article.objects.similar_to(np.asarray(stored))[:3])
    assert len(found) == 3
    # Nothing re-embeds the rows with the settings' model on this host.
    ref = indexing.get_ref("testapp.Article", "embedding")
    Article.objects.filter(title=TITLES[1]).update(body="changed text")
    with pytest.raises(VersionUnavailable):
        indexing.embed_stale(ref)
    versions = set(Article.objects.values_list("embedding_version", flat=True))
    assert versions == {target.version}


@pytest.mark.django_db
def test_the_start_up_check_names_the_missing_version(model_dir, settings, tmp_path):
    target = promote_a_version()
    assert check_local_files(databases=["default"]) == []
    become_a_host_without_the_files(settings, tmp_path)

    errors = check_local_files(databases=["default"])
    assert [e.id for e in errors] == ["django_sbert.E012"]
    assert target.version in errors[0].msg
    assert target.directory in errors[0].msg and "MODEL_STORAGE" in errors[0].hint
    with pytest.raises(SystemCheckError, match="E012"):
        call_command("check", databases=["default"])
    out = io.StringIO()
    call_command("sbert_status", "--no-progress", stdout=out)
    line = f"Encoder 'default' must encode with version {target.version!r}"
    assert line in out.getvalue() and "(check django_sbert.E012)" in out.getvalue()


@pytest.mark.django_db
@pytest.mark.urls("tests.api.urls")
def test_rest_search_answers_503_with_a_request_id(model_dir, settings, tmp_path):
    from rest_framework.test import APIClient

    from django_sbert.api import registry

    target = promote_a_version()
    become_a_host_without_the_files(settings, tmp_path)
    registry.register(Article, fields=["id", "title"])
    try:
        response = APIClient().get("/api/sbert/search/", {"model": "testapp.article", "q": "x"})
    finally:
        registry.unregister(Article)
    assert response.status_code == 503
    # The reason is in the log under the request id; the client reads general words.
    assert target.version not in response.json()["detail"]
    assert response.json()["request_id"] and response["Retry-After"]


@pytest.mark.django_db
def test_a_never_fine_tuned_site_reads_the_database_once_per_cache_period(settings):
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 60}
    serving.forget_serving()
    serving.base_version("default")  # its database record is read once per process
    with CaptureQueriesContext(connection) as ctx:
        for _ in range(50):
            current = serving.serving_record("default")
    assert current.is_base and current.version == serving.base_version("default")
    selects = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT")]
    assert len(selects) == 1


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_worker_without_the_files_leaves_rows_for_a_worker_that_has_them(
    model_dir, settings, tmp_path
):
    """A real worker on a host without the files fails its tasks instead of writing base
    vectors; a worker with the files then embeds the rows with the promoted version."""
    target = promote_a_version()
    queue = f"sbert-files-test-{uuid.uuid4().hex[:8]}"
    settings.SBERT = {**settings.SBERT, "QUEUE": queue}
    ref = indexing.get_ref("testapp.Article", "embedding")
    pks = list(Article.objects.values_list("pk", flat=True))
    Article.objects.update(body="edited while the volume was away")

    def start(store: Path, name: str) -> Worker:
        env = {"SBERT_TEST_MODEL_STORE": str(store), "SBERT_TEST_TRAINING_QUEUE": queue + "-t"}
        log = tmp_path / f"{name}.log"
        return Worker(log, queue, settings_module="tests.worker_settings", env=env)

    empty = tmp_path / "empty-volume"
    empty.mkdir()
    worker = start(empty, "without-files")
    try:
        enqueue_embed(ref, pks)
        # The task's own failure: the warm-up at worker start fails with the same error first.
        worker.wait_for("raised unexpected: VersionUnavailable", timeout=60)
    finally:
        worker.stop()
    assert up_to_date(ref) == 0, "a host without the files wrote vectors"
    assert set(Article.objects.values_list("embedding_version", flat=True)) == {target.version}

    worker = start(model_dir, "with-files")
    try:
        enqueue_embed(ref, pks)
        deadline = time.monotonic() + 60
        while up_to_date(ref) < len(pks):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rows never embedded:\n{worker.output()[-3000:]}")
            time.sleep(0.2)
    finally:
        worker.stop()
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(queue)
    assert set(Article.objects.values_list("embedding_version", flat=True)) == {target.version}


def up_to_date(ref: indexing.FieldRef) -> int:
    """Rows whose stored hash is the hash of their current text."""
    return sum(
        row.embedding_hash == ref.field.text_hash(ref.field.get_source_text(row))
        for row in Article.objects.all()
    )


@pytest.mark.django_db
@pytest.mark.urls("tests.admin.urls")
def test_the_admin_search_says_why_instead_of_a_500(model_dir, settings, tmp_path, admin_client):
    target = promote_a_version()
    become_a_host_without_the_files(settings, tmp_path)
    response = admin_client.get("/admin/testapp/article/", {"q": "central bank"})
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert any("unavailable" in m and target.version in m for m in shown), shown
