"""Wagtail's backend suite (``modelsearch.tests.test_backends.BackendTests``, which Wagtail 7.1+
and 8 run for their database and Elasticsearch backends) against Wagtail's database backend and
django-sbert's backend in each mode, on the suite's own models and data.

Each class is the suite as Wagtail subclasses it for a backend: the mixin, the backend's path,
the backend as the only entry of ``WAGTAILSEARCH_BACKENDS``.

A test that differs by design (``DIFFERS`` in differences.py, the table in docs/wagtail.md) is
an expected failure with the tiny random model: a vector or hybrid search finds every object,
ranked by meaning, where the suite expects only those holding the words. With the real model
(``SBERT_SUITE_MODEL=minilm``) it runs instead as what is right for it: the suite's own
assertions hold on the first N results, N being how many objects hold the words (the keyword
mode's count of the same search).
"""

from __future__ import annotations

import contextlib
import os
import sys
import unittest
from collections.abc import Callable, Iterator
from unittest import mock

import wagtail.search.models
from django.db import connection
from django.test import TestCase, override_settings

# The suite imports modelsearch's concrete IndexEntry, which a Wagtail site has as
# wagtail.search's (the "modelsearch" app is not installed beside "wagtail.search").
sys.modules.setdefault("modelsearch.models", wagtail.search.models)

from modelsearch.tests.test_backends import BackendTests  # noqa: E402

from django_sbert.contrib.wagtail.backend import SbertSearchBackend  # noqa: E402
from tests.wagtail.suite.differences import DIFFERS, OPEN  # noqa: E402

SBERT = "django_sbert.contrib.wagtail"
DATABASE = "wagtail.search.backends.database"
REAL_MODEL = os.environ.get("SBERT_SUITE_MODEL", "") == "minilm"


@contextlib.contextmanager
def first_n_by_keyword_count() -> Iterator[None]:
    """Each vector or hybrid search cut at the number of objects holding its words (the keyword
    mode's count of the same search); sorted by the queryset's order (``order_by_relevance=
    False``), the first N by meaning in that order."""
    search, autocomplete = SbertSearchBackend.search, SbertSearchBackend.autocomplete

    def cut(method: Callable) -> Callable:
        def cut_search(self, query, model_or_queryset, **kwargs):
            results = method(self, query, model_or_queryset, **kwargs)
            if self.mode == "keyword":
                return results
            keyword = SbertSearchBackend({"MODE": "keyword"})
            n = method(keyword, query, model_or_queryset, **kwargs).count()
            if kwargs.get("order_by_relevance", True):
                return results[:n]
            relevance = {**kwargs, "order_by_relevance": True}
            first = {o.pk for o in method(self, query, model_or_queryset, **relevance)[:n]}
            return [o for o in results if o.pk in first]

        return cut_search

    with (
        mock.patch.object(SbertSearchBackend, "search", cut(search)),
        mock.patch.object(SbertSearchBackend, "autocomplete", cut(autocomplete)),
    ):
        yield


def _vacuum_hnsw_tables() -> None:
    """VACUUM the tables with an HNSW index, from a connection of its own: each test's rolled
    back rows leave dead entries in the graph, which after some dozens of tests hide live rows
    from a filtered scan (tests/conftest.py, ``_vacuum_hnsw_tables``, says more)."""
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as own:
        for table in ("sbert_wagtail_searchentry", "sbert_wagtail_searchentryembeddingpassage"):
            with contextlib.suppress(psycopg.Error):
                own.execute(f"VACUUM {table}")


def _backends(conf: dict) -> dict:
    return {"default": conf}


@override_settings(
    WAGTAILSEARCH_BACKENDS=_backends({"BACKEND": DATABASE}),
    MODELSEARCH_BACKENDS=_backends({"BACKEND": DATABASE}),
)
class WagtailDatabaseBackend(BackendTests, TestCase):
    """Wagtail's own database backend (PostgreSQL full text), the reference beside ours."""

    backend_path = DATABASE

    # Wagtail's own PostgreSQL test class skips these, with this reason.
    _reason = "The Postgres backend doesn't support MatchAll as an inner expression."
    test_search_not_match_none = unittest.skip(_reason)(BackendTests.test_search_not_match_none)
    test_search_or_match_all = unittest.skip(_reason)(BackendTests.test_search_or_match_all)
    test_search_or_match_none = unittest.skip(_reason)(BackendTests.test_search_or_match_none)
    test_search_and_match_all = unittest.skip(_reason)(BackendTests.test_search_and_match_all)
    test_search_and_match_none = unittest.skip(_reason)(BackendTests.test_search_and_match_none)


class SbertBackendTests(BackendTests):
    """The suite on django-sbert's backend in ``mode``."""

    backend_path = SBERT
    mode = ""

    def setUp(self) -> None:
        _vacuum_hnsw_tables()
        super().setUp()


def _own(test: Callable, *, cut: bool = False) -> Callable:
    """A test of the mixin as this class's own function (``expectedFailure`` marks the
    function it is given); ``cut``: run under ``first_n_by_keyword_count()``."""

    def own(self) -> None:
        if cut:
            with first_n_by_keyword_count():
                test(self)
        else:
            test(self)

    own.__name__ = own.__qualname__ = test.__name__
    own.__doc__ = test.__doc__
    return own


def _suite_class(mode: str) -> type:
    conf = _backends({"BACKEND": SBERT, "OPTIONS": {"MODE": mode}})
    attrs: dict = {"mode": mode, "__module__": __name__}
    for name in DIFFERS[mode]:
        test = getattr(BackendTests, name)
        attrs[name] = _own(test, cut=True) if REAL_MODEL else unittest.expectedFailure(_own(test))
    for name in OPEN[mode]:
        attrs[name] = unittest.expectedFailure(_own(getattr(BackendTests, name)))
    cls = type(f"Sbert{mode.title()}", (SbertBackendTests, TestCase), attrs)
    return override_settings(WAGTAILSEARCH_BACKENDS=conf, MODELSEARCH_BACKENDS=conf)(cls)


SbertKeyword = _suite_class("keyword")
SbertVector = _suite_class("vector")
SbertHybrid = _suite_class("hybrid")
