"""Django views of django-sbert that are not part of the REST API.

Modules: ``click`` (a click or conversion on a logged search result, posted by
``django_sbert/clicks.js``), ``errors`` (what a client reads when a part is away),
``forms`` (``SearchForm``), ``health`` (this process's readiness), ``search``
(``SearchView`` and ``AsyncSearchView``, a search page) and ``suggest`` (``SuggestView``,
search-as-you-type as JSON, for sites without Django REST framework).

``from django_sbert.views import health`` keeps working: the names are re-exported here.
"""

from __future__ import annotations

from .click import click
from .health import health
from .search import AsyncSearchView, SearchTiming, SearchView
from .suggest import SuggestView

__all__ = ["AsyncSearchView", "SearchTiming", "SearchView", "SuggestView", "click", "health"]
