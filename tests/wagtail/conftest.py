"""A tiny Wagtail news site: a root, a home page, two sections of news pages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps

# tests/settings.py installs Wagtail's apps only when this run needs them (and Wagtail is
# installed); otherwise these tests are not collected.
WAGTAIL = apps.is_installed("tests.wagtail.newsapp")
collect_ignore_glob = [] if WAGTAIL else ["test_*.py"]

if WAGTAIL:
    from wagtail.models import Collection, Locale, Page

    from django_sbert.contrib.wagtail.models import SearchEntry
    from django_sbert.indexing import embed_stale, get_ref
    from tests.celery_app import app
    from tests.wagtail.newsapp.models import NewsIndexPage, NewsPage


@dataclass
class Site:
    home: Page
    world: NewsIndexPage
    sport: NewsIndexPage


def page_text(page: NewsPage) -> str:
    """What a query must say to be nearest to ``page`` under the tiny random model: its index
    row's text (the same tokens give the same vector)."""
    entry = SearchEntry.objects.get(object_id=str(page.pk))
    return f"{entry.title} {entry.body}"


def embed_entries() -> None:
    """Embed the index rows in this process, as ``update_index`` or the worker does."""
    embed_stale(get_ref(SearchEntry._meta.label, "embedding"))


@pytest.fixture(autouse=True)
def wagtail_rows(db) -> None:
    """A locale and the root collection: a transactional test's flush removed the ones
    Wagtail's data migrations made."""
    Locale.objects.get_or_create(language_code="en")
    if Collection.get_first_root_node() is None:
        Collection.add_root(name="Root")


@pytest.fixture
def site(db) -> Site:
    """The tree: a root page, a home page, two sections."""
    root = Page.get_first_root_node() or Page.add_root(instance=Page(title="Root", slug="root"))
    home = root.add_child(instance=Page(title="Home", slug="home-sbert"))
    world = home.add_child(instance=NewsIndexPage(title="World", slug="world"))
    sport = home.add_child(instance=NewsIndexPage(title="Sport", slug="sport"))
    return Site(home, world, sport)


@pytest.fixture
def add_news() -> Callable[..., NewsPage]:
    def add(parent: Page, title: str, paragraph: str, *, live: bool = True, **fields: Any):
        page = NewsPage(
            title=title,
            body=[("paragraph", paragraph)],
            live=live,
            **fields,
        )
        parent.add_child(instance=page)
        return page

    return add


@pytest.fixture
def eager() -> Iterator[None]:
    """Celery tasks run inline when sent (the task logic, not delivery)."""
    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved
