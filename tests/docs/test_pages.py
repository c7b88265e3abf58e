"""Every docs page is read and what its snippets name exists: imports of django_sbert, SBERT
keys, management commands and their options, make targets, Celery worker lines, and links
between pages (files and #anchors). A code block that needs a running site or shows a
placeholder on purpose is marked ``<!-- docs-test: skip (why) -->``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, ROOT, Block, anchors, blocks, inline_code, links, pages

PAGES = pages()
SHELL = ("sh", "bash", "console", "")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def python_source(block: Block) -> str:
    """The block as a module: doctest prompts removed, printed output dropped, a method shown
    without its class dedented."""
    lines = block.text.splitlines()
    if any(line.startswith(">>> ") for line in lines):
        lines = [line[4:] for line in lines if line.startswith((">>> ", "... "))]
    return textwrap.dedent("\n".join(lines))


def shell_commands(page: Path) -> list[str]:
    """Shell lines of the page's code blocks (continuations joined) and its inline code."""
    found = []
    for block in blocks(page):
        if block.skipped or block.language not in SHELL:
            continue
        text = block.text.replace("\\\n", " ")
        found += [line.split(" #", 1)[0].lstrip("$ ").strip() for line in text.splitlines()]
    return found + inline_code(page)


def test_every_page_is_read() -> None:
    """The checks below cover every page: none is left out by the glob."""
    every = {p for p in DOCS.rglob("*.md")}
    assert every == set(PAGES), f"pages the docs tests do not read: {every - set(PAGES)}"
    assert (DOCS / "index.md") in PAGES


def test_the_index_links_every_page() -> None:
    listed = {(DOCS / target.split("#")[0]).resolve() for target in links(DOCS / "index.md")}
    missing = [page_id(p) for p in PAGES if p.name != "index.md" and p.resolve() not in listed]
    assert not missing, f"pages docs/index.md does not list: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_each_page_says_what_it_is_for_and_where_to_go_next(page: Path) -> None:
    """A title, then a line of prose (not a heading or code); and a way on at the end."""
    lines = [line for line in page.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# "), f"{page_id(page)} does not start with its title"
    assert not lines[1].startswith(("#", "```", "|", "-", "<")), (
        f"{page_id(page)}: the title is not followed by a line saying what the page is for"
    )
    if page.name != "index.md":
        text = page.read_text()
        assert "\nNext: " in text or "## Where to go next" in text, (
            f"{page_id(page)} does not say where to go next"
        )


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_python_snippets_parse(page: Path) -> None:
    broken = []
    for block in blocks(page):
        if block.language == "python" and not block.skipped:
            try:
                ast.parse(python_source(block))
            except SyntaxError as exc:
                broken.append(f"{block.where()}: {exc}")
    assert not broken, broken


def sbert_imports(page: Path) -> list[tuple[str, str, list[str]]]:
    """(where, module, names) of each ``import django_sbert...`` in the page's Python."""
    found = []
    for block in blocks(page):
        if block.language != "python" or block.skipped:
            continue
        for node in ast.walk(ast.parse(python_source(block))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django_sbert"):
                found.append((block.where(), node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("django_sbert"):
                        found.append((block.where(), alias.name, []))
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_imports_of_django_sbert_work(page: Path) -> None:
    """Every ``from django_sbert... import name`` a page shows imports here."""
    broken = []
    for where, module, names in sbert_imports(page):
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            broken.append(f"{where}: import {module}: {exc}")
            continue
        for name in names:
            if not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    broken.append(f"{where}: {module} has no {name}")
    assert not broken, broken


# SBERT["KEY"], SBERT["GROUP"]["KEY"], SBERT["ENCODERS"][name]["KEY"] in prose and code.
SUBSCRIPT = re.compile(r"""SBERT((?:\[(?:"[A-Z0-9_]+"|'[A-Z0-9_]+'|name|[a-z_]+)\])+)""")


def key_problem(path: list[str]) -> str | None:
    """What is wrong with a path of SBERT keys, or None (``name``: any encoder's name)."""
    from django_sbert import conf
    from django_sbert.conf.schema import Group, PerName

    for end in range(1, len(path) + 1):
        old = tuple("*" if p == "name" else p for p in path[:end])
        # SEARCH["FUSION"] was a method's name and is now the group holding it.
        if old in conf.RENAMED and old != ("SEARCH", "FUSION"):
            return f"SBERT{list(old)} is an earlier spelling of SBERT{list(conf.RENAMED[old])}"
        if old in conf.RETIRED:
            return f"SBERT{list(old)} is no longer a setting"
    declared = conf.TOP.get(path[0])
    if declared is None:
        return f"SBERT has no key {path[0]!r}"
    rest = path[1:]
    if isinstance(declared, PerName):
        rest, declared = rest[1:], declared.group  # the encoder's name, then its keys
    while rest and isinstance(declared, Group):
        if rest[0] not in declared.keys:
            return f"SBERT{path[: len(path) - len(rest)]} has no key {rest[0]!r}"
        declared, rest = declared.keys[rest[0]], rest[1:]
    return None


def sbert_paths(page: Path) -> list[list[str]]:
    paths = []
    for match in SUBSCRIPT.finditer(page.read_text()):
        parts = re.findall(r"\[([^\]]+)\]", match[1])
        paths.append([p.strip("\"'") for p in parts])
    for block in blocks(page):
        if block.language != "python" or block.skipped:
            continue
        for node in ast.walk(ast.parse(python_source(block))):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "SBERT" for t in node.targets)
                and isinstance(node.value, ast.Dict)
            ):
                paths += dict_paths(node.value, [])
    return paths


def dict_paths(node: ast.Dict, prefix: list[str]) -> list[list[str]]:
    """Key paths of an ``SBERT = {...}`` literal, down to the settings' own keys (a group's
    keys; an encoder's keys under its name)."""
    found = []
    for key, value in zip(node.keys, node.values, strict=True):
        if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
            continue
        path = [*prefix, key.value]
        found.append(path)
        depth = 3 if path[0] == "ENCODERS" else 2 if path[0] != "SEARCH" else 3
        if isinstance(value, ast.Dict) and len(path) < depth:
            found += dict_paths(value, path)
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_sbert_keys_exist(page: Path) -> None:
    """Every SBERT key a page names is declared in django_sbert/conf.py."""
    problems = sorted({p for p in map(key_problem, sbert_paths(page)) if p})
    assert not problems, f"{page_id(page)}: {problems}"


def command_options(name: str) -> set[str] | None:
    """Option strings of ``manage.py name`` in the test settings, None if no such command."""
    from django.core.management import get_commands, load_command_class

    app = get_commands().get(name)
    if app is None:
        return None
    parser = load_command_class(app, name).create_parser("manage.py", name)
    return {s for action in parser._actions for s in action.option_strings}  # noqa: SLF001


# Commands of optional apps the test settings do not install.
OTHER_APPS = {"update_index": "wagtail.search"}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_management_commands_and_options_exist(page: Path) -> None:
    problems = []
    for line in shell_commands(page):
        for match in re.finditer(r"manage\.py +([a-z_]+)((?: +[^ &|;]+)*)", line):
            name, rest = match[1], match[2]
            options = command_options(name)
            if options is None:
                if name not in OTHER_APPS:
                    problems.append(f"no command {name!r}: {line}")
                continue
            for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
                if option not in options:
                    problems.append(f"{name} has no option {option}: {line}")
    assert not problems, f"{page_id(page)}: {problems}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_python_modules_run_as_scripts_exist(page: Path) -> None:
    """``python -m django_sbert...`` and ``python -m benchmarks...`` name modules that exist."""
    missing = []
    for line in shell_commands(page):
        for module in re.findall(r"python -m ((?:django_sbert|benchmarks)[\w.]*)", line):
            if importlib.util.find_spec(module) is None:
                missing.append(module)
    assert not missing, f"{page_id(page)}: no module {missing}"


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.MULTILINE))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_make_targets_exist(page: Path) -> None:
    targets = make_targets()
    named = set()
    for line in shell_commands(page):
        for match in re.finditer(r"(?:^|&& |; )make +((?:[a-z][\w-]* *)+)", line):
            named |= {word for word in match[1].split() if "=" not in word}
    assert named <= targets, f"{page_id(page)}: no make target {sorted(named - targets)}"


# The worker story (docs/commands.md, "Celery workers"): these lines and no others.
WORKERS = {
    ("-Q", "sbert,sbert-train", "--pool", "solo"),  # a small site's one worker
    ("-Q", "sbert", "--pool", "solo"),  # indexing, one per host
    ("-Q", "sbert", "-P", "prefork", "-c", "N"),  # indexing, N processes on one host
    ("-Q", "sbert-train", "--pool", "solo"),  # the training worker
}
# Options that do not change the story: the log level, the node name.
NEUTRAL = ("-l", "--loglevel", "-n", "--hostname")


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_celery_workers_are_the_documented_ones(page: Path) -> None:
    odd = []
    for line in shell_commands(page):
        for match in re.finditer(r"celery -A +\S+ +worker((?: +[^ #`]+)*)", line):
            words = shlex.split(match[1])
            kept = []
            while words:
                word = words.pop(0)
                if word in NEUTRAL:
                    words.pop(0)
                else:
                    kept.append(word)
            if tuple(kept) not in WORKERS:
                odd.append(match[0])
    assert not odd, f"{page_id(page)}: worker commands not in docs/commands.md's story: {odd}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_resolve_to_pages_and_anchors(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_anchor = bool(anchor) and linked.suffix == ".md" and anchor not in anchors(linked)
        if not linked.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page_id(page)} links to missing files or anchors: {broken}"
