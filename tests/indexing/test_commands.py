"""``sbert_reindex`` and ``sbert_status`` against the real database and the tiny encoder."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
from celery import Celery
from django.core.management import CommandError, call_command

from django_sbert import indexing
from django_sbert.serving import encoder_version
from tests.celery_app import app
from tests.testapp.models import Article, Note

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def eager() -> Iterator[None]:
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager = app.conf.task_eager_propagates = False


def article_ref() -> indexing.FieldRef:
    return indexing.get_ref("testapp.Article", "embedding")


def test_reindex_stale_sync_embeds_rows_made_without_signals():
    Article.objects.bulk_create(Article(title=f"bulk {i}", body="rates") for i in range(5))
    output = run("sbert_reindex", "testapp.Article", "--stale", "--sync", "--batch-size", "2")
    assert "testapp.Article.embedding: 5 embedded" in output
    assert indexing.count_stale(article_ref()) == 0
    assert "0 embedded" in run("sbert_reindex", "testapp.Article.embedding", "--sync")


def test_reindex_all_sync_reembeds_everything():
    rows = Article.objects.bulk_create(Article(title=f"a {i}") for i in range(3))
    indexing.embed_pks(article_ref(), [r.pk for r in rows])
    before = dict(Article.objects.values_list("pk", "embedding_updated_at"))
    assert "3 embedded" in run("sbert_reindex", "testapp.Article", "--all", "--sync")
    after = dict(Article.objects.values_list("pk", "embedding_updated_at"))
    assert all(after[pk] > before[pk] for pk in before)


def test_reindex_without_sync_sends_tasks(eager):
    Article.objects.bulk_create(Article(title=f"t {i}") for i in range(5))
    Note.objects.bulk_create([Note(text="n")])
    output = run("sbert_reindex", "--batch-size", "2")
    assert "testapp.Article.embedding: sent 5 rows in 3 task(s) to queue 'sbert'" in output
    assert "testapp.Note.embedding: sent 1 rows in 1 task(s)" in output
    assert indexing.count_stale(article_ref()) == 0


def test_reindex_reports_an_unreachable_broker():
    Article.objects.bulk_create([Article(title="t")])
    down = Celery("broker-down", broker="redis://127.0.0.1:1/15", set_as_current=False)
    down.set_current()
    try:
        with pytest.raises(CommandError, match="--sync"):
            run("sbert_reindex", "testapp.Article")
    finally:
        app.set_current()


def test_reindex_rejects_bad_targets():
    with pytest.raises(CommandError, match="no installed model"):
        run("sbert_reindex", "nope.Nothing", "--sync")
    with pytest.raises(CommandError, match="not an EmbeddingField"):
        run("sbert_reindex", "testapp.Article.title", "--sync")
    with pytest.raises(CommandError):
        call_command("sbert_reindex", "--stale", "--all")


def test_status_counts_rows_embedded_stale_missing():
    rows = Article.objects.bulk_create(Article(title=f"s {i}") for i in range(4))
    indexing.embed_pks(article_ref(), [r.pk for r in rows[:3]])
    Article.objects.filter(pk=rows[0].pk).update(body="changed")
    Article.objects.filter(pk=rows[1].pk).update(embedding_version="old-model:0")

    output = run("sbert_status")
    assert output.startswith("encoder 'default': ")  # the host's inference path comes first
    table = output[output.index("\nfield ") + 1 :].splitlines()
    lines = {line.split()[0]: line.split() for line in table[1:] if line.strip()}
    assert table[0].split() == [
        "field", "encoder", "rows", "embedded", "stale", "missing", "version",
    ]  # fmt: skip
    assert lines["testapp.Article.embedding"] == [
        "testapp.Article.embedding", "default", "4", "3", "3", "1", encoder_version("default"),
    ]  # fmt: skip
    assert "testapp.Article.embedding: 1 row(s) encoded by old-model:0 (stale)" in output
    assert lines["testapp.Note.embedding"][2:6] == ["0", "0", "0", "0"]
