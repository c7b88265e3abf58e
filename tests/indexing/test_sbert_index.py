"""manage.py sbert_index (builds the declared HNSW indexes with its --maintenance-work-mem and
--parallel-workers, a progress bar and the size it made) and the sizing checks W021 / W022,
against real PostgreSQL + pgvector."""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.test.utils import override_settings

from django_sbert.indexing.sizing import check_scale, hnsw_indexes
from django_sbert.management.commands.sbert_index import build_progress
from tests.scaleapp.models import BinaryArticle
from tests.testapp.models import Article

DIM = 32


def rows(model, n: int = 300) -> None:
    vectors = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float32)
    model.objects.bulk_create(model(title=f"t{i}", embedding=v) for i, v in enumerate(vectors))


def index_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
        return cursor.fetchone() is not None


def run(*args: str, **settings) -> str:
    out, err = io.StringIO(), io.StringIO()
    sbert = {**django_settings.SBERT, **settings}
    with override_settings(SBERT=sbert):
        call_command("sbert_index", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


@pytest.mark.django_db(transaction=True)  # CREATE INDEX after inserts: not in their transaction
def test_rebuilds_the_declared_index_with_the_flags_and_reports_its_size():
    rows(Article)
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX article_embedding_hnsw")
    output = run(
        "testapp.Article.embedding", "--maintenance-work-mem", "77MB", "--parallel-workers", "1"
    )
    assert index_exists("article_embedding_hnsw")
    assert "77MB maintenance_work_mem, up to 1 parallel workers" in output  # read back from
    with connection.cursor() as cursor:  # the session, and reset after the build
        cursor.execute("SHOW maintenance_work_mem")
        assert cursor.fetchone()[0] != "77MB"
    size = next(
        i.bytes for i in hnsw_indexes(connection.cursor()) if i.name == "article_embedding_hnsw"
    )
    assert "Built article_embedding_hnsw in" in output and "on disk" in output and size > 0
    assert "done" in output  # the progress bar ran to its end


@pytest.mark.django_db
def test_the_binary_index_is_built_too():
    rows(BinaryArticle)
    name = BinaryArticle._meta.get_field("embedding").binary_index_name
    output = run("scaleapp.BinaryArticle", "--no-progress")
    assert f"Built {name}" in output and index_exists(name)


@pytest.mark.django_db(transaction=True)
def test_concurrently_builds_outside_a_transaction():
    rows(Article)
    output = run("testapp.Article.embedding", "--concurrently", "--no-progress")
    assert "Built article_embedding_hnsw" in output and index_exists("article_embedding_hnsw")


@pytest.mark.django_db
def test_a_field_without_an_index_and_bad_targets():
    assert "no HNSW index is declared" in run("testapp.Note", "--no-progress")
    with pytest.raises(CommandError, match="no installed model"):
        run("nope.Model")
    with pytest.raises(CommandError, match="--parallel-workers"):
        rows(Article)
        run("testapp.Article", "--parallel-workers", "-1")


@pytest.mark.django_db(transaction=True)
def test_build_progress_reads_a_running_build_from_another_connection():
    """A build kept waiting on purpose (by a transaction that wrote to the table: CREATE
    INDEX CONCURRENTLY waits for it) shows up, read from a third connection."""
    rows(Article, 50)
    assert build_progress(connection.cursor(), "testapp_article") is None
    wrote, release = threading.Event(), threading.Event()

    def in_thread(work):
        def run():
            try:
                with connections["default"].cursor() as cursor:
                    work(cursor)
            finally:
                connections["default"].close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def hold(cursor):
        cursor.execute("BEGIN")
        cursor.execute("UPDATE testapp_article SET title = title")
        wrote.set()
        release.wait(30)
        cursor.execute("COMMIT")

    def build(cursor):
        cursor.execute(
            "CREATE INDEX CONCURRENTLY slow_hnsw ON testapp_article "
            "USING hnsw (embedding vector_cosine_ops)"
        )

    holder = in_thread(hold)
    wrote.wait(30)
    builder = in_thread(build)
    seen = None
    for _ in range(100):
        seen = build_progress(connection.cursor(), "testapp_article")
        # A build is briefly "initializing" before it starts to wait for the writer.
        if seen is not None and seen[0] != "initializing":
            break
        time.sleep(0.1)
    release.set()
    holder.join()
    builder.join()
    assert seen is not None and seen[0].startswith("waiting for writers"), seen
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS slow_hnsw")


@pytest.mark.django_db
def test_w021_counts_rows_with_a_vector_but_no_version(settings):
    rows(Article, 5)  # bulk_create with only the vector: the silent gap
    warnings = [m for m in check_scale(databases=["default"]) if m.id == "django_sbert.W021"]
    assert len(warnings) == 1 and "5 rows of testapp_article" in warnings[0].msg
    assert "bulk_load" in warnings[0].hint
    Article.objects.update(embedding_version="v")
    assert not [m for m in check_scale(databases=["default"]) if m.id == "django_sbert.W021"]


@pytest.mark.django_db
def test_w022_warns_when_the_indexes_outgrow_the_memory(settings):
    settings.SBERT = {**settings.SBERT, "INDEX": {"MEMORY": "1kB"}}
    warnings = [m for m in check_scale(databases=["default"]) if m.id == "django_sbert.W022"]
    assert len(warnings) == 1 and "The HNSW indexes of database 'default' take" in warnings[0].msg
    settings.SBERT = {**settings.SBERT, "INDEX": {"MEMORY": None}}  # effective_cache_size: 4GB
    assert not [m for m in check_scale(databases=["default"]) if m.id == "django_sbert.W022"]
