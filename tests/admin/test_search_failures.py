"""The admin when a semantic search cannot run now: a message and an empty list, never a 500.

The slow statement is real: this module's admin site filters articles through a PostgreSQL
function that sleeps for each row, so searches run past a short STATEMENT_TIMEOUT and
PostgreSQL cancels them. The module is its own URLconf.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.urls import path

from django_sbert import indexing
from tests.testapp.admin import ArticleAdmin
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]


class SlowArticleAdmin(ArticleAdmin):
    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .filter(RawSQL("pg_sleep(0.05) IS NOT NULL", [], output_field=BooleanField()))
        )


slow_site = admin.AdminSite(name="slow_admin")
slow_site.register(Article, SlowArticleAdmin)
urlpatterns = [path("admin/", slow_site.urls)]


@pytest.fixture
def articles(settings) -> list[Article]:
    rows = Article.objects.bulk_create(
        Article(title=f"interest rates rise {i}", body="banks") for i in range(6)
    )
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    settings.SBERT = {**settings.SBERT, "SEARCH": {"STATEMENT_TIMEOUT": 0.02}}
    return rows


def shown(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_a_changelist_search_cancelled_at_the_timeout_says_why(admin_client, articles):
    response = admin_client.get("/admin/testapp/article/", {"q": "interest rates"})
    assert response.status_code == 200
    assert any("Semantic search is unavailable" in m for m in shown(response)), shown(response)
    assert list(response.context["cl"].result_list) == []


def test_similar_items_cancelled_at_the_timeout_leave_the_change_page_working(
    admin_client, articles
):
    response = admin_client.get(f"/admin/testapp/article/{articles[0].pk}/change/")
    assert response.status_code == 200
    assert response.context["sbert_similar"] == []
    assert any("Similar items are unavailable" in m for m in shown(response)), shown(response)
