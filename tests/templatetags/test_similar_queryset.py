"""``{% sbert_similar obj k queryset=... %}`` ranks only the rows it is given, and keeps the
list of each queryset apart in the cache (issue 67, item 1), on real PostgreSQL."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.template import Context, Template

from django_sbert import indexing
from django_sbert.templatetags.sbert import similar_cache_key
from tests.testapp.models import Article, Report

pytestmark = pytest.mark.django_db

TITLES = [
    "central bank raises interest rates",
    "the bank lifted its rate to fight inflation",
    "football team wins the cup",
    "storm closes schools",
]


@pytest.fixture(autouse=True)
def fresh_tables_and_cache():
    passages = Report._meta.get_field("embedding").passage_model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {passages}, testapp_report, testapp_article")
    cache.clear()
    yield
    cache.clear()


def similar(obj: Article, **context) -> list[int]:
    source = (
        "{% load sbert %}{% sbert_similar obj 3 QS as s %}{% for r in s %}{{ r.pk }},{% endfor %}"
    )
    source = source.replace("QS", "queryset=visible" if "visible" in context else "")
    html = Template(source).render(Context({"obj": obj, **context}))
    return [int(pk) for pk in html.split(",") if pk]


def test_sbert_similar_lists_only_the_queryset_and_caches_each_apart():
    rows = Article.objects.bulk_create(Article(title=title, body="story") for title in TITLES)
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    shown, draft = Article.objects.get(pk=rows[0].pk), rows[1]
    Article.objects.filter(pk=draft.pk).update(published=False)  # the nearest row: a draft
    visible = Article.objects.filter(published=True)

    public = similar(shown, visible=visible)
    assert draft.pk not in public and len(public) == 2 and shown.pk not in public
    # Cached per queryset: the default manager's list (the draft included) is its own, and
    # the public list, asked again, is still without the draft.
    everything = similar(shown)
    assert draft.pk in everything
    assert similar(shown, visible=visible) == public
    field = Article._meta.get_field("embedding")
    keys = {
        similar_cache_key(shown, 3, field, visible),
        similar_cache_key(shown, 3, field, Article.objects.all()),
        similar_cache_key(shown, 3, field),
    }
    assert len(keys) == 3
    assert similar(shown, visible=Article.objects.none()) == []
