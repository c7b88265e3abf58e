"""Admin for the articles.

``EmbeddingAdminMixin`` ranks the changelist search by meaning, adds "Re-embed selected", and
lists similar articles on each change page; ``sbert_pair_fields`` adds "Make training pairs
from selected": headline -> lead paragraph pairs (``Article.lead``), what a news search is
asked (a short description) and what answers it (the article's opening). django-sbert's own
admin (training pairs, runs, encoder versions: the fine-tuning workflow) comes with
``django_sbert`` in INSTALLED_APPS.
"""

from __future__ import annotations

from django.contrib import admin

from django_sbert.admin import EmbeddingAdminMixin

from .models import Article


@admin.register(Article)
class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
    list_display = ["title", "category", "published"]
    list_filter = ["category", "published"]
    search_fields = ["title"]
    date_hierarchy = "published"
    sbert_pair_fields = ("title", "lead")
    readonly_fields = ["embedding_version", "embedding_updated_at"]
    fields = ["title", "body", "category", "published", "url", *readonly_fields]
