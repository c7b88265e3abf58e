"""More like this from a row whose vector has no encoder version (written outside
django-sbert): nothing would keep the search to one version's rows, so it is refused, by
``similar_to(row)``, similar/ (409) and the admin's similar items, rather than ranking the
vectors of every version together."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_sbert import api, indexing
from django_sbert.exceptions import UnversionedVector
from tests.testapp.models import Article

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows() -> dict[str, Article]:
    """Three embedded rows: one's version is then emptied, another's is an older version's."""
    made = {
        "unversioned": Article.objects.create(title="central bank raises interest rates"),
        "current": Article.objects.create(title="the bank lifted its rate"),
        "old": Article.objects.create(title="the bank will cut rates"),
    }
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    Article.objects.filter(pk=made["unversioned"].pk).update(embedding_version=None)
    Article.objects.filter(pk=made["old"].pk).update(embedding_version="an-older-version")
    for row in made.values():
        row.refresh_from_db()
    return made


def test_similar_to_a_row_without_a_version_is_refused(rows):
    with pytest.raises(UnversionedVector, match="no encoder version"):
        list(Article.objects.similar_to(rows["unversioned"], k=5))
    # A vector passed in is still searched with (the caller chose to).
    found = Article.objects.similar_to(rows["unversioned"].embedding, k=5)
    assert rows["old"] in list(found)
    # A row with its version compares with that version's rows only.
    assert list(Article.objects.similar_to(rows["current"], k=5)) == []


@pytest.mark.urls("tests.api.urls")
def test_similar_endpoint_answers_409_for_a_row_without_a_version(rows, client):
    saved = dict(api.registry._entries)
    api.registry.clear()
    try:
        api.register(Article, fields=["id", "title"])
        response = client.get(f"/api/sbert/similar/testapp.article/{rows['unversioned'].pk}/")
    finally:
        api.registry.clear()
        api.registry._entries.update(saved)
    assert response.status_code == 409, response.content
    assert "no embedding yet" in response.json()["detail"]


@pytest.mark.urls("tests.admin.urls")
def test_admin_lists_no_similar_items_across_versions(rows, client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get(f"/admin/testapp/article/{rows['unversioned'].pk}/change/")
    assert page.status_code == 200
    assert page.context["sbert_similar"] == []
    assert "no encoder version" in page.content.decode()
