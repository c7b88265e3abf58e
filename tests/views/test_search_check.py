"""Check E015: a routed search page that cannot answer as configured is a start-up error
(``manage.py check``), not a 500 on its first search."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test.utils import override_settings

from django_sbert.checks import check_search_views

URLS = "tests.views.search_check_urls"


def problems() -> dict[str, str]:
    """Message of each E015, by the route its hint names."""
    with override_settings(ROOT_URLCONF=URLS):
        found = check_search_views()
    assert {m.id for m in found} <= {"django_sbert.E015"}
    return {m.hint.split("'")[1]: m.msg for m in found}


def test_modes_that_need_a_keyword_column_the_field_lacks_fail_the_check() -> None:
    found = problems()
    for route in ("notes/", "async-notes/", "site/notes/"):
        assert "has no full-text column" in found[route], found
        assert "Set modes = ('vector',)" in found[route]
        assert "keyword_search=True" in found[route]


def test_routes_that_can_answer_pass_the_check() -> None:
    found = problems()
    # as_view()'s arguments count: one mode that needs no keyword column.
    assert "notes-vector/" not in found
    assert "articles/" not in found
    assert "suggesting/" not in found


def test_a_suggest_url_that_names_no_route_fails_the_check() -> None:
    assert "'nowhere' names no URL" in problems()["lost/"]


def test_manage_py_check_reports_it() -> None:
    with override_settings(ROOT_URLCONF=URLS), pytest.raises(SystemCheckError) as raised:
        call_command("check", "--tag", "urls", stdout=StringIO(), stderr=StringIO())
    assert "django_sbert.E015" in str(raised.value)
    assert "search_check_urls.NoteSearch" in str(raised.value)


def test_no_urlconf_no_check() -> None:
    with override_settings(ROOT_URLCONF=None):
        assert check_search_views() == []
