"""bulk_load(): rows with precomputed vectors, written by COPY with their hash and version, so
they are searchable by text at once and the sweep leaves them alone; bad input is refused
before anything is written. Real PostgreSQL + pgvector and the tiny encoder."""

from __future__ import annotations

import numpy as np
import pytest

from django_sbert.indexing import bulk_load, count_stale, get_ref
from django_sbert.serving import encode_texts, encoder_version
from tests.scaleapp.models import BinaryArticle
from tests.testapp.models import Article, Note, Report

pytestmark = pytest.mark.django_db

DIM = 32  # the tiny test model

TITLES = ["interest rates rise", "the dog runs fast", "guitar music", "the election vote"]


def encoded(model, objs) -> np.ndarray:
    field = model._meta.get_field("embedding")
    return encode_texts([field.get_source_text(obj) for obj in objs])


def test_loaded_rows_are_current_and_found_by_text():
    objs = [Article(title=t, body="", category="c") for t in TITLES]
    assert bulk_load(objs, encoded(Article, objs)) == 4
    rows = list(Article.objects.order_by("pk"))
    assert [r.title for r in rows] == TITLES
    field = Article._meta.get_field("embedding")
    for row in rows:
        assert row.embedding_hash == field.text_hash(field.get_source_text(row))
        assert row.embedding_version == encoder_version()
        assert row.embedding_updated_at is not None
    # Searchable by text at once (text searches compare rows of the serving version) ...
    best = Article.objects.similar_to("the dog runs fast\n")[:1].get()
    assert best.title == "the dog runs fast" and best.similarity == pytest.approx(1, abs=1e-5)
    # ... and nothing for the sweep to encode again.
    assert count_stale(get_ref("testapp.Article", "embedding")) == 0


def test_a_callable_source_and_a_halfvec_column():
    notes = [Note(text=t, tags="x") for t in TITLES]
    bulk_load(notes, encoded(Note, notes))
    assert count_stale(get_ref("testapp.Note", "embedding")) == 0
    rows = [BinaryArticle(title=t) for t in TITLES]
    vectors = encoded(BinaryArticle, rows)
    bulk_load(rows, vectors)
    stored = np.array([r.embedding for r in BinaryArticle.objects.order_by("pk")], dtype=np.float32)
    np.testing.assert_allclose(stored, vectors, atol=2e-3)  # halfvec: float16 rounding


def test_instances_with_primary_keys_move_the_sequence():
    objs = [Article(pk=100 + i, title=t) for i, t in enumerate(TITLES)]
    bulk_load(objs, encoded(Article, objs))
    assert sorted(Article.objects.values_list("pk", flat=True)) == [100, 101, 102, 103]
    assert Article.objects.create(title="after").pk > 103  # no clash with the loaded keys


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        (np.ones((4, DIM + 1)), "holds 32-dimensional vectors"),
        (np.ones((3, DIM)), "4 rows but 3 vectors"),
        (np.full((4, DIM), np.nan), "NaN or infinite"),
        ("not numbers", "2-D array of numbers"),
    ],
)
def test_wrong_vectors_are_refused_and_nothing_is_written(vectors, message):
    objs = [Article(title=t) for t in TITLES]
    with pytest.raises(ValueError, match=message):
        bulk_load(objs, vectors)
    assert not Article.objects.exists()


def test_a_version_the_encoder_does_not_serve_is_refused():
    objs = [Article(title=t) for t in TITLES]
    with pytest.raises(ValueError, match="serves"):
        bulk_load(objs, encoded(Article, objs), version="some-other-model:1234")
    assert not Article.objects.exists()
    bulk_load(objs, encoded(Article, objs), version=encoder_version())  # the serving one: fine
    assert Article.objects.count() == 4


def test_other_misuse_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="passages"):
        bulk_load([Report(title="a")], np.ones((1, DIM)))
    with pytest.raises(ValueError, match="one model"):
        bulk_load([Article(title="a"), Note(text="b")], np.ones((2, DIM)))
    with pytest.raises(ValueError, match="no EmbeddingField 'nope'"):
        bulk_load([Article(title="a")], np.ones((1, DIM)), field="nope")
    assert bulk_load([], np.ones((0, DIM))) == 0
