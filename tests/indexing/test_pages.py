"""``indexing.rows.pages_by_pk``: the one keyset walk that sbert_reindex --all, staging a
promotion and finding stale rows (both kinds of source) share."""

from __future__ import annotations

import pytest

from django_sbert import indexing
from django_sbert.indexing.rows import pages_by_pk
from tests.testapp.models import Article, Product

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("size", [1, 3, 7, 8, 50])
def test_every_row_is_visited_once_in_pk_order(size):
    rows = Article.objects.bulk_create(Article(title=f"row {i}", body="b") for i in range(7))
    expected = sorted(row.pk for row in rows)

    pages = list(pages_by_pk(Article.objects.all(), size))

    visited = [pk for page in pages for pk in page]
    assert visited == expected  # each once, in order
    assert all(len(page) == size for page in pages[:-1]) and 1 <= len(pages[-1]) <= size


def test_rows_pages_hold_the_querysets_instances_and_keep_its_filters():
    Article.objects.bulk_create(
        Article(title=f"row {i}", body="b", category="odd" if i % 2 else "even") for i in range(9)
    )
    qs = Article.objects.filter(category="odd").only("title")

    pages = list(pages_by_pk(qs, 2, rows=True))

    assert [len(page) for page in pages] == [2, 2]
    assert all(isinstance(row, Article) and row.category == "odd" for p in pages for row in p)


def test_a_row_changed_between_pages_is_not_visited_again():
    rows = Article.objects.bulk_create(Article(title=f"row {i}", body="b") for i in range(6))
    pages = pages_by_pk(Article.objects.filter(published=True), 2)
    first = next(pages)
    Article.objects.filter(pk=first[0]).update(title="edited")  # still matches
    rest = [pk for page in pages for pk in page]
    assert first + rest == sorted(row.pk for row in rows)


def test_an_empty_queryset_gives_no_page_and_a_bad_size_is_refused():
    assert list(pages_by_pk(Article.objects.none(), 3)) == []
    with pytest.raises(ValueError, match="size must be at least 1"):
        list(pages_by_pk(Article.objects.all(), 0))


@pytest.mark.parametrize(("model", "field"), [(Article, "embedding"), (Product, "embedding")])
def test_stale_rows_of_either_kind_of_source_come_once_and_respect_limit(model, field):
    """Field-name sources page in SQL, callable sources in Python: both through the helper."""
    if model is Article:
        made = model.objects.bulk_create(model(title=f"t {i}", body="b") for i in range(7))
    else:
        made = model.objects.bulk_create(model(name=f"n {i}", description="d") for i in range(7))
    ref = indexing.get_ref(f"testapp.{model.__name__}", field)
    pks = sorted(row.pk for row in made)

    chunks = list(indexing.iter_stale_pks(ref, chunk_rows=3))
    assert [pk for chunk in chunks for pk in chunk] == pks

    limited = list(indexing.iter_stale_pks(ref, chunk_rows=3, limit=5))
    assert [len(chunk) for chunk in limited] == [3, 2]
    assert [pk for chunk in limited for pk in chunk] == pks[:5]
