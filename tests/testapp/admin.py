"""Admin of the test models: Article and Report use EmbeddingAdminMixin (tests/admin/)."""

from __future__ import annotations

from django.contrib import admin

from django_sbert.admin import EmbeddingAdminMixin

from .models import Article, Report


@admin.register(Article)
class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
    list_display = ("title", "category")
    search_fields = ("title", "body")
    sbert_pair_fields = ("title", "body")


@admin.register(Report)
class ReportAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
    list_display = ("title", "category")
