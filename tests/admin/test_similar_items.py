"""The change page's "Similar items" of ``EmbeddingAdminMixin``: only rows the user may see,
and no error for a model whose default manager is a plain ``models.Manager``.

The admins under test live on their own ``AdminSite`` (this module is the URLconf), so the
project's ``tests/testapp/admin.py`` stays as it is. Real parts: PostgreSQL and pgvector, the
tiny encoder, the Django test client.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.test.utils import isolate_apps
from django.urls import path

from django_sbert import indexing
from django_sbert.admin import EmbeddingAdminMixin
from tests.testapp.admin import ArticleAdmin
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

site = admin.AdminSite(name="similar_items_admin")


class PublishedOnlyArticleAdmin(ArticleAdmin):
    """A site's usual restriction: staff see published articles only."""

    def get_queryset(self, request):
        return super().get_queryset(request).filter(published=True)


site.register(Article, PublishedOnlyArticleAdmin)

# A model whose default manager has no similar_to(): a proxy of Article, kept out of the
# project's app registry (so makemigrations and the sweep never see it).
with isolate_apps("tests.testapp"):

    class PlainArticle(Article):
        objects = models.Manager()

        class Meta:
            proxy = True
            app_label = "testapp"


site.register(PlainArticle, type("PlainArticleAdmin", (EmbeddingAdminMixin, admin.ModelAdmin), {}))

urlpatterns = [path("admin/", site.urls)]


@pytest.fixture
def articles() -> dict[str, Article]:
    rows = {
        "shown": Article.objects.create(title="central bank raises interest rates"),
        "neighbour": Article.objects.create(title="the bank lifted its rate to fight inflation"),
        "hidden": Article.objects.create(
            title="secret draft: the bank will cut rates", published=False
        ),
    }
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    return rows


@pytest.fixture
def superuser(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def test_similar_items_leave_out_rows_the_admin_hides(superuser, articles):
    page = superuser.get(f"/admin/testapp/article/{articles['shown'].pk}/change/")
    assert page.status_code == 200
    listed = [item.pk for item, _ in page.context["sbert_similar"]]
    assert listed == [articles["neighbour"].pk]
    html = page.content.decode()
    assert "Similar items" in html and articles["neighbour"].title in html
    assert "secret draft" not in html
    assert f"/article/{articles['hidden'].pk}/change/" not in html
    # the hidden row is near enough to be listed were it visible
    assert articles["hidden"].pk in Article.objects.similar_to(articles["shown"]).values_list(
        "pk", flat=True
    )


def test_similar_items_for_a_model_whose_manager_is_plain(superuser, articles):
    assert not hasattr(PlainArticle._default_manager, "similar_to")
    page = superuser.get(f"/admin/testapp/plainarticle/{articles['shown'].pk}/change/")
    assert page.status_code == 200
    listed = [item.pk for item, _ in page.context["sbert_similar"]]
    assert set(listed) == {articles["neighbour"].pk, articles["hidden"].pk}
    link = f"/admin/testapp/plainarticle/{articles['neighbour'].pk}/change/"
    assert link in page.content.decode()
