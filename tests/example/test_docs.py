"""The docs name what the code has: docs/settings.md shows the settings' declaration,
docs/reference.md lists every check, command, task and endpoint, and every relative link in
README.md and docs/ points at a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.example.conftest import ROOT

REFERENCE = ROOT / "docs" / "reference.md"
PACKAGE = ROOT / "django_sbert"


def reference() -> str:
    return REFERENCE.read_text()


def test_the_settings_page_shows_the_declaration() -> None:
    """docs/settings.md's tables are the ones rendered from conf.py's declaration."""
    from django_sbert import conf

    page = (ROOT / "docs" / "settings.md").read_text()
    assert conf.write_reference(page) == page, (
        "docs/settings.md is out of date: python -m django_sbert.conf --write docs/settings.md"
    )
    for key in (*conf.TOP, *conf.ENCODER.keys, *conf.SEARCH.keys, *conf.API.keys):
        assert f"| `{key}` |" in page


def test_every_check_id_is_in_the_reference() -> None:
    ids = set()
    for path in PACKAGE.rglob("*.py"):
        ids |= set(re.findall(r"django_sbert\.[EW]\d{3}", path.read_text()))
    missing = sorted(i for i in ids if i not in reference())
    assert not missing, f"system checks missing from docs/reference.md: {missing}"


def test_every_management_command_is_in_the_reference() -> None:
    commands = [p.stem for p in (PACKAGE / "management" / "commands").glob("[!_]*.py")]
    missing = sorted(c for c in commands if f"`{c}" not in reference())
    assert not missing, f"commands missing from docs/reference.md: {missing}"


def test_every_task_is_in_the_reference() -> None:
    source = (PACKAGE / "celery.py").read_text()  # the task names: the wire format
    names = re.findall(r'^\w+_TASK = "(django_sbert\.\w+)"', source, re.MULTILINE)
    assert names
    missing = sorted(n for n in names if n not in reference())
    assert not missing, f"tasks missing from docs/reference.md: {missing}"


def test_every_endpoint_is_in_the_reference() -> None:
    from django.urls import URLPattern, URLResolver

    from django_sbert.api import urls

    def routes(patterns, prefix: str = "") -> list[str]:
        found = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                found += routes(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                found.append(prefix + str(pattern.pattern))
        return found

    text = reference()
    missing = []
    for route in routes(urls.urlpatterns):
        # "^training-runs/(?P<pk>[^/.]+)/cancel/$" and "similar/<str:model>/<str:pk>/" ->
        # the literal words of the path, which the reference must show in that order.
        words = [w for w in re.split(r"\(\?P<\w+>[^)]*\)|<[^>]+>|[\^$/]+", route) if w]
        if words and not re.search(r"/<?[\w.]*>?/?".join(map(re.escape, words)), text):
            missing.append(route)
    assert not missing, f"endpoints missing from docs/reference.md: {missing}"


DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "example_project").rglob("README.md")),
]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(page: Path) -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    broken = [
        link
        for link in links
        if "://" not in link
        and not link.startswith("mailto:")
        and not (page.parent / link).exists()
    ]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"
