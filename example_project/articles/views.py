"""The search page (django-sbert's ``SearchView``, with the demo's category filter and "more
like this") and the article page."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from django_sbert.query import SemanticQuerySet
from django_sbert.views import SearchView

from . import search
from .models import Article

SIMILAR_ON_ARTICLE_PAGE = 6
EXAMPLE_QUERIES = [
    "central banks raise interest rates",
    "oil prices climb as supply tightens",
    "parliament passes a new constitution",
    "workers go on strike over pay",
    "ceasefire talks between rebels and the army",
]


class ArticleSearch(SearchView):
    """``?q=`` in ``?mode=`` hybrid (default), vector or keyword; ``?like=<id>`` lists the
    articles most like one; ``&category=`` filters either."""

    model = Article
    template_name = "articles/search.html"  # extends django_sbert/search.html
    base_template = "articles/base.html"
    keyword_match = "any"  # a sentence-long query still finds articles holding its rare words
    max_pages = 5  # the top 50 of a ranking, 10 a page
    placeholder = f"Search by meaning, e.g. “{EXAMPLE_QUERIES[0]}”"
    suggest_url = "articles:suggest"
    like: Article | None = None

    def filter_queryset(self, queryset: SemanticQuerySet) -> SemanticQuerySet:
        category = self.request.GET.get("category")
        if category in search.CATEGORY_FILTERS:
            return queryset.filter(search.CATEGORY_FILTERS[category])
        return queryset

    def get_search_query(self) -> str | Article | None:
        like = self.request.GET.get("like", "")
        self.like = Article.objects.filter(pk=like).first() if like.isdigit() else None
        if self.like is not None:  # more like this: by its stored vector, once it has one
            return self.like if self.like.embedding is not None else None
        return super().get_search_query()

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        category = self.request.GET.get("category")
        category = category if category in search.CATEGORY_FILTERS else None
        return super().get_context_data(
            category=category,
            categories=search.CATEGORY_CHOICES,
            category_label=dict(search.CATEGORY_CHOICES).get(category),
            like=self.like,
            like_pending=self.like is not None and self.like.embedding is None,
            coverage=search.coverage(),
            examples=EXAMPLE_QUERIES,
            **kwargs,
        )


def article_page(request: HttpRequest, pk: int) -> HttpResponse:
    article = get_object_or_404(Article, pk=pk)
    similar = None
    if article.embedding is not None:
        similar = Article.objects.similar_to(article)[:SIMILAR_ON_ARTICLE_PAGE]
    return render(
        request,
        "articles/article.html",
        {"article": article, "similar": similar, "paragraphs": _paragraphs(article.body)},
    )


# A sentence ends after two lowercase letters or digits and a full stop (so not after "U.S.").
SENTENCE_END = re.compile(r'(?:(?<=[a-z0-9)]{2}[.!?])|(?<=[a-z0-9)]{2}[.!?]["”]))\s+(?=["“A-Z])')


def _paragraphs(body: str, sentences_per_paragraph: int = 4) -> list[str]:
    """The corpus keeps each article on one line; break it into readable paragraphs."""
    parts = [p.strip() for p in body.split("\n") if p.strip()]
    if len(parts) > 1:
        return parts
    sentences = SENTENCE_END.split(body)
    return [
        " ".join(sentences[i : i + sentences_per_paragraph]).strip()
        for i in range(0, len(sentences), sentences_per_paragraph)
    ]
