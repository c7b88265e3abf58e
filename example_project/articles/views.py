"""The search page and the article page."""

from __future__ import annotations

import re

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from . import search
from .models import Article

PAGE_SIZE = 10
SIMILAR_ON_ARTICLE_PAGE = 6
EXAMPLE_QUERIES = [
    "central banks raise interest rates",
    "oil prices climb as supply tightens",
    "parliament passes a new constitution",
    "workers go on strike over pay",
    "ceasefire talks between rebels and the army",
]


def search_page(request: HttpRequest) -> HttpResponse:
    """``?q=`` text search, or ``?like=<id>`` more like an article; ``&category=`` filters,
    ``&mode=`` picks hybrid (default), vector or keyword search for a text."""
    query = request.GET.get("q", "").strip()[:500]
    category = request.GET.get("category") or None
    if category not in search.CATEGORY_FILTERS:
        category = None
    mode = request.GET.get("mode") or search.DEFAULT_MODE
    if mode not in dict((value, label) for value, label, _ in search.MODES):
        mode = search.DEFAULT_MODE
    like = None
    if request.GET.get("like", "").isdigit():
        like = Article.objects.filter(pk=request.GET["like"]).first()

    results: list[Article] | None = None
    timing = None
    if like is not None and like.embedding is not None:
        results, timing = search.timed_search(like, search.VECTOR, category)
    elif query:
        results, timing = search.timed_search(query, mode, category)

    page = None
    if results is not None:
        page = Paginator(results, PAGE_SIZE).get_page(request.GET.get("page"))
        if like is None:  # a text search: show where in each article it matched
            search.highlight(page.object_list, query)
    return render(
        request,
        "articles/search.html",
        {
            "query": query,
            "category": category,
            "categories": search.CATEGORY_CHOICES,
            "category_label": dict(search.CATEGORY_CHOICES).get(category),
            "mode": mode,
            "modes": search.MODES,
            "like": like,
            "like_pending": like is not None and like.embedding is None,
            "page": page,
            "timing": timing,
            "coverage": search.coverage(),
            "examples": EXAMPLE_QUERIES,
            "snippet_chars": search.SNIPPET_CHARS,
        },
    )


def article_page(request: HttpRequest, pk: int) -> HttpResponse:
    article = get_object_or_404(Article, pk=pk)
    similar = None
    if article.embedding is not None:
        similar = search.search(article, limit=SIMILAR_ON_ARTICLE_PAGE)
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
