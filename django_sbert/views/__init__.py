"""Django views of django-sbert that are not part of the REST API.

Modules:

* ``click``: a click or conversion on a logged search result (``django_sbert/clicks.js``
  posts here), for server-rendered pages.
* ``errors``: what a client reads when a part is away (a 503), shared with the REST API.
* ``forms``: ``SearchForm``, the query and the mode of a search page.
* ``health``: the readiness of this process, for a load balancer or an orchestrator.
* ``search``: ``SearchView`` and ``AsyncSearchView``, a search page (form, modes, filters,
  pagination to a bounded depth, highlighted passages) on the default template
  ``django_sbert/search.html``.
* ``suggest``: ``SuggestView``, search-as-you-type suggestions as JSON, for sites without
  Django REST framework (``django_sbert/suggest.js`` shows them under a search box).

``from django_sbert.views import health`` keeps working: the names are re-exported here.
"""

from __future__ import annotations

from .click import click
from .health import health
from .search import AsyncSearchView, SearchTiming, SearchView
from .suggest import SuggestView

__all__ = ["AsyncSearchView", "SearchTiming", "SearchView", "SuggestView", "click", "health"]
