"""URLs of the feedback tests: the REST API and the plain views where the docs mount them, and
a search page (``SearchView``)."""

from __future__ import annotations

from pathlib import Path

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import include, path
from django.views.static import serve

import django_sbert
from django_sbert.feedback import log_search
from tests.testapp.models import Article
from tests.views.urls import ArticleSearch

# A results page of a site's own view: log_search(), then the tags on its links.
HITS = engines["django"].from_string(
    "{% load sbert %}<html><body><ol>{% for hit in hits %}"
    '<li><a class="hit" href="/landing/{{ hit.pk }}/"{% sbert_click_attrs hit %}>'
    "{{ hit.title }}</a></li>{% endfor %}</ol>{% sbert_click_script %}</body></html>"
)


def hits_page(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "")
    hits = list(Article.objects.similar_to(q)[:5])
    log_search(request, hits, query=q, mode="vector")
    return HttpResponse(HITS.render({"hits": hits}, request))


def landing(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(f"<html><body><h1 id='landed'>{pk}</h1></body></html>")


STATIC = Path(django_sbert.__file__).parent / "static"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/sbert/", include("django_sbert.api.urls")),
    path("sbert/", include("django_sbert.urls")),
    path("search/", ArticleSearch.as_view(), name="search"),
    path("shallow/", ArticleSearch.as_view(paginate_by=2), name="shallow"),
    path("hits/", hits_page),
    path("landing/<int:pk>/", landing),
    path("static/<path:path>", serve, {"document_root": STATIC}),
]
