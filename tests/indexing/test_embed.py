"""django_sbert.indexing: text, hashes, staleness in one query, batch embedding, safe writes.

The tiny random encoder and the real PostgreSQL; no Celery here (see test_tasks.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_sbert import indexing
from django_sbert.fields import text_hash
from django_sbert.serving import encode_texts, encoder_version
from tests.testapp.models import Article, Note, Product

pytestmark = pytest.mark.django_db


def make_articles(n: int, prefix: str = "article") -> list[Article]:
    """Rows created without signals, as bulk_create does in real projects."""
    return Article.objects.bulk_create(
        Article(title=f"{prefix} {i}", body=f"the market rate rose {i} times") for i in range(n)
    )


def article_ref() -> indexing.FieldRef:
    return indexing.get_ref("testapp.Article", "embedding")


def test_embed_pks_stores_vectors_and_bookkeeping():
    rows = make_articles(5)
    stats = indexing.embed_pks(article_ref(), [a.pk for a in rows], batch_size=2)

    assert (stats.examined, stats.embedded, stats.up_to_date, stats.changed) == (5, 5, 0, 0)
    for article in Article.objects.all():
        text = f"{article.title}\n{article.body}"
        assert article.embedding_hash == text_hash(text)
        assert article.embedding_version == encoder_version("default")
        assert article.embedding_updated_at is not None
        expected = encode_texts([text])[0]
        np.testing.assert_allclose(np.asarray(article.embedding), expected, atol=1e-5)


def test_unchanged_rows_are_skipped_and_force_reembeds():
    rows = make_articles(3)
    ref = article_ref()
    indexing.embed_pks(ref, [a.pk for a in rows])
    stamps = dict(Article.objects.values_list("pk", "embedding_updated_at"))

    again = indexing.embed_pks(ref, [a.pk for a in rows])
    assert (again.up_to_date, again.embedded) == (3, 0)
    assert dict(Article.objects.values_list("pk", "embedding_updated_at")) == stamps

    forced = indexing.embed_pks(ref, [a.pk for a in rows], force=True)
    assert forced.embedded == 3
    assert all(
        stamp > stamps[pk]
        for pk, stamp in Article.objects.values_list("pk", "embedding_updated_at")
    )


def test_deleted_rows_are_counted_missing():
    rows = make_articles(3)
    Article.objects.filter(pk=rows[0].pk).delete()
    stats = indexing.embed_pks(article_ref(), [a.pk for a in rows])
    assert (stats.missing, stats.embedded) == (1, 2)


def test_sql_hash_matches_python_hash():
    Article.objects.bulk_create(
        [
            Article(title="Zürich 東京 — naïve", body="emoji 🙂 and\nnew lines\t tabs"),
            Article(title="", body=""),
            Article(title="only title", body=""),
        ]
    )
    field = Article._meta.get_field("embedding")
    rows = Article.objects.annotate(h=field.sql_text_hash_expression())
    for article in rows:
        assert article.h == text_hash(field.get_source_text(article))


def test_stale_rows_are_one_query():
    """Missing vectors, queryset.update() edits and old encoder versions, found by SQL alone."""
    ref = article_ref()
    rows = make_articles(6)
    indexing.embed_pks(ref, [a.pk for a in rows])
    assert not indexing.stale_queryset(ref).exists()

    Article.objects.filter(pk=rows[0].pk).update(body="edited without signals")
    Article.objects.filter(pk=rows[1].pk).update(embedding_version="some-older-model:0000")
    Article.objects.filter(pk=rows[2].pk).update(embedding=None)
    (new,) = make_articles(1, prefix="bulk")
    expected = {rows[0].pk, rows[1].pk, rows[2].pk, new.pk}

    with CaptureQueriesContext(connection) as queries:
        found = set(indexing.stale_queryset(ref).values_list("pk", flat=True))
    assert found == expected
    assert len(queries) == 1
    assert {pk for chunk in indexing.iter_stale_pks(ref, chunk_rows=2) for pk in chunk} == expected

    stats = indexing.embed_stale(ref)
    assert stats.embedded == 4
    assert not indexing.stale_queryset(ref).exists()


def test_iter_stale_pks_respects_limit_and_ends():
    ref = article_ref()
    make_articles(7)
    chunks = list(indexing.iter_stale_pks(ref, chunk_rows=3, limit=5))
    assert [len(c) for c in chunks] == [3, 2]


def test_a_later_edit_is_never_overwritten_by_an_older_vector():
    """Edit the row between encode and write: the write must skip it."""
    ref = article_ref()
    (article,) = make_articles(1)
    pending, _ = indexing.read_pending(ref, [article.pk])
    vectors = indexing.encode_rows(ref, pending)

    article.title = "edited while the worker was encoding"
    article.save()  # also schedules a task; on_commit never fires in this test transaction

    assert indexing.write_vectors(ref, pending, vectors) == 0
    article.refresh_from_db()
    assert article.embedding is None
    assert article.embedding_hash is None

    # The edit's own embedding stores the new text's vector.
    stats = indexing.embed_pks(ref, [article.pk])
    assert stats.embedded == 1
    article.refresh_from_db()
    assert article.embedding_hash == text_hash(f"{article.title}\n{article.body}")


def test_an_already_embedded_row_keeps_its_newer_vector():
    """Worker A encodes text 1; the row changes to text 2 and worker B stores it; A must not
    then replace B's vector with its older one."""
    ref = article_ref()
    (article,) = make_articles(1)
    old_pending, _ = indexing.read_pending(ref, [article.pk])
    old_vectors = indexing.encode_rows(ref, old_pending)

    Article.objects.filter(pk=article.pk).update(title="text two")
    indexing.embed_pks(ref, [article.pk])
    article.refresh_from_db()
    newer = np.asarray(article.embedding)

    assert indexing.write_vectors(ref, old_pending, old_vectors) == 0
    article.refresh_from_db()
    np.testing.assert_array_equal(np.asarray(article.embedding), newer)
    assert article.embedding_hash == text_hash(f"text two\n{article.body}")


def test_method_and_function_sources_are_scanned_in_python():
    notes = Note.objects.bulk_create(Note(text=f"note {i}", tags="a") for i in range(3))
    products = Product.objects.bulk_create(
        Product(name=f"car {i}", description="fast") for i in range(2)
    )
    note_ref = indexing.get_ref("testapp.Note", "embedding")
    product_ref = indexing.get_ref("testapp.Product", "embedding")
    assert not indexing.has_exact_sql_staleness(note_ref)

    assert indexing.embed_pks(note_ref, [n.pk for n in notes]).embedded == 3
    assert indexing.embed_pks(product_ref, [p.pk for p in products]).embedded == 2
    note = Note.objects.get(pk=notes[0].pk)
    assert note.embedding_hash == text_hash("note 0\ntags: a")
    assert indexing.count_stale(note_ref) == 0

    Note.objects.filter(pk=notes[1].pk).update(tags="changed")  # no signal
    assert [pk for chunk in indexing.iter_stale_pks(note_ref, chunk_rows=1) for pk in chunk] == [
        notes[1].pk
    ]
    assert indexing.embed_stale(note_ref).embedded == 1
    assert indexing.count_stale(note_ref) == 0


def test_field_status_counts():
    ref = article_ref()
    rows = make_articles(4)
    indexing.embed_pks(ref, [a.pk for a in rows[:3]])
    Article.objects.filter(pk=rows[0].pk).update(title="changed")

    status = indexing.field_status(ref)
    assert (status.rows, status.embedded, status.missing, status.stale) == (4, 3, 1, 2)
    assert status.version == encoder_version("default")
    assert status.versions == {status.version: 3}


def test_resolve_targets():
    everything = {str(ref) for ref in indexing.resolve_targets()}
    assert {"testapp.Article.embedding", "testapp.Note.embedding"} <= everything
    assert [str(r) for r in indexing.resolve_targets(["testapp.Article"])] == [
        "testapp.Article.embedding"
    ]
    with pytest.raises(LookupError, match="has no EmbeddingField"):
        indexing.resolve_targets(["testapp.Author"])
    with pytest.raises(LookupError, match="not an EmbeddingField"):
        indexing.resolve_targets(["testapp.Article.title"])
    with pytest.raises(LookupError, match="no installed model"):
        indexing.resolve_targets(["nope.Missing"])
