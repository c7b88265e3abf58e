"""Admin of the test models: Article uses EmbeddingAdminMixin (tests/admin/test_admin.py)."""

from __future__ import annotations

from django.contrib import admin

from django_sbert.admin import EmbeddingAdminMixin

from .models import Article


@admin.register(Article)
class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
    list_display = ("title", "category")
    search_fields = ("title", "body")
    sbert_pair_fields = ("title", "body")
