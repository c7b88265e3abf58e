"""News pages: a title, a teaser, a StreamField body, and a category to filter on."""

from __future__ import annotations

from django.db import models
from wagtail import blocks
from wagtail.fields import StreamField
from wagtail.models import Page
from wagtail.search import index


class NewsIndexPage(Page):
    """A section: news pages live under it (descendant_of filters)."""


class NewsPage(Page):
    teaser = models.CharField(max_length=300, blank=True)
    category = models.CharField(max_length=50, blank=True)
    body = StreamField(
        [("heading", blocks.CharBlock()), ("paragraph", blocks.TextBlock())],
        blank=True,
    )

    search_fields = [
        *Page.search_fields,
        index.SearchField("teaser", boost=2),
        index.SearchField("body"),
        index.FilterField("category"),
    ]
