"""The reference pages are the code's: docs/settings.md shows every SBERT key with its default
and every system check; docs/commands.md every management command with every option;
docs/reference.md every task and endpoint. The two rendered pages match their generators."""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest

from tests.docs.pages import DOCS, ROOT

PACKAGE = ROOT / "django_sbert"
SETTINGS = DOCS / "settings.md"
COMMANDS = DOCS / "commands.md"
REFERENCE = DOCS / "reference.md"


def section(text: str, begin: str, end: str) -> str:
    head, found, rest = text.partition(begin)
    assert found, f"marker {begin} missing"
    return rest.partition(end)[0]


def test_the_settings_page_is_rendered_from_the_declaration() -> None:
    from django_sbert import conf

    page = SETTINGS.read_text()
    assert conf.write_reference(page) == page, (
        "docs/settings.md is out of date: python -m django_sbert.conf --write docs/settings.md"
    )


def settings_groups():
    from django_sbert import conf
    from django_sbert.conf.schema import Setting

    top = {name: item for name, item in conf.TOP.items() if isinstance(item, Setting)}
    yield "top", top
    for _, group in conf.groups():  # nested ones (SEARCH["FUSION"]) too
        yield group.anchor, group.keys


@pytest.mark.parametrize("part, keys", list(settings_groups()), ids=lambda v: str(v)[:20])
def test_every_key_is_shown_with_its_default(part, keys) -> None:
    """Each key of each group has its row in the group's table, with its default."""
    from django_sbert import conf
    from django_sbert.conf.schema import Group

    table = section(SETTINGS.read_text(), conf.BEGIN.format(part), conf.END.format(part))
    assert keys
    for key, setting in keys.items():
        row = re.search(rf"^\| `{key}` \| ([^|]*) \|", table, re.MULTILINE)
        assert row, f"docs/settings.md has no row for {key} in {part}"
        value = setting.defaults() if isinstance(setting, Group) else setting.default
        if isinstance(setting, Group):
            assert "`{}`" in row[1], f"{key}: a group's row shows {{}}"
            continue
        assert _literal(row[1]) == value or str(value) in row[1], (
            f"{key}: {value!r} not in {row[0]}"
        )


def _literal(cell: str) -> Any:
    """The default a row shows, read as the Python a settings module would write."""
    code = re.match(r"\s*`([^`]*)`", cell)
    try:
        return ast.literal_eval(code[1]) if code else None
    except (ValueError, SyntaxError):
        return None


def test_every_group_has_its_heading() -> None:
    """The tables' links ([Keys](#search)) land on their group's heading."""
    from tests.docs.pages import anchors

    headings = anchors(SETTINGS)
    missing = [part for part, _ in settings_groups() if part != "top" and part not in headings]
    assert not missing, f"docs/settings.md lacks headings for {missing}"


def check_ids() -> set[str]:
    """Every system check id the package raises (id="django_sbert.E001"), and every one its
    modules name."""
    ids = set()
    for path in PACKAGE.rglob("*.py"):
        ids |= set(re.findall(r"django_sbert\.[EW]\d{3}", path.read_text()))
    return ids


def test_every_system_check_is_in_the_settings_page() -> None:
    raised = set()
    for path in PACKAGE.rglob("*.py"):
        raised |= set(re.findall(r'id="(django_sbert\.[EW]\d{3})"', path.read_text()))
    ids = check_ids()
    assert raised and raised <= ids
    page = SETTINGS.read_text()
    missing = sorted(i for i in ids if f"| `{i}` |" not in page)
    assert not missing, f"system checks missing from docs/settings.md's table: {missing}"


def test_the_commands_page_is_rendered_from_the_parsers() -> None:
    from django_sbert.management import reference

    page = COMMANDS.read_text()
    assert reference.write_reference(page) == page, (
        "docs/commands.md is out of date: "
        "python -m django_sbert.management.reference --write docs/commands.md"
    )


def test_every_command_and_option_is_in_the_commands_page() -> None:
    """Independently of the generator: each command's parser, each of its option strings."""
    from django.core.management import load_command_class

    from django_sbert.management.reference import DJANGO_OPTIONS

    page = COMMANDS.read_text()
    commands = sorted(p.stem for p in (PACKAGE / "management" / "commands").glob("[!_]*.py"))
    assert "sbert_train" in commands
    missing = []
    for name in commands:
        if f"## `{name}`" not in page:
            missing.append(name)
            continue
        text = page.partition(f"## `{name}`")[2].partition("\n## ")[0]
        parser = load_command_class("django_sbert", name).create_parser("manage.py", name)
        for action in parser._actions:  # noqa: SLF001
            if set(action.option_strings) & DJANGO_OPTIONS:
                continue  # --help, --verbosity...: every command has them
            for option in action.option_strings:
                if f"`{option}`" not in text:
                    missing.append(f"{name} {option}")
            if not action.option_strings and f"`{action.metavar or action.dest}`" not in text:
                missing.append(f"{name} {action.dest}")
    assert not missing, f"missing from docs/commands.md: {missing}"


def test_every_task_is_in_the_reference() -> None:
    source = (PACKAGE / "celery.py").read_text()  # the task names: the wire format
    names = re.findall(r'^\w+_TASK = "(django_sbert\.\w+)"', source, re.MULTILINE)
    assert names
    missing = sorted(n for n in names if n not in REFERENCE.read_text())
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

    text = REFERENCE.read_text()
    missing = []
    for route in routes(urls.urlpatterns):
        # "^training-runs/(?P<pk>[^/.]+)/cancel/$" and "similar/<str:model>/<str:pk>/" ->
        # the literal words of the path, which the reference must show in that order.
        words = [w for w in re.split(r"\(\?P<\w+>[^)]*\)|<[^>]+>|[\^$/]+", route) if w]
        if words and not re.search(r"/<?[\w.]*>?/?".join(map(re.escape, words)), text):
            missing.append(route)
    assert not missing, f"endpoints missing from docs/reference.md: {missing}"


OTHER_PAGES = [ROOT / "README.md", *sorted((ROOT / "example_project").rglob("README.md"))]


@pytest.mark.parametrize("page", OTHER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_outside_docs_point_at_files(page) -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    broken = [
        link
        for link in links
        if "://" not in link
        and not link.startswith("mailto:")
        and not (page.parent / link).exists()
    ]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"
