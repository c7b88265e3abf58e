"""docs/architecture.md against the tree, both read at test time: its module lists name every
package and module under ``django_sbert/``, its flows name modules and functions that exist,
and it names every test folder. When a module moves, these tests say which line to update.

The page's conventions, parsed here:

* "Every module": one list item per package, ``- `path/`: ...``, the path from
  ``django_sbert/`` (``django_sbert/`` itself for the root modules); the item names each module
  in it as ``name.py`` and each package in it as ``name/`` (code spans);
* "The flows": modules as ``path/module.py`` from ``django_sbert/`` (root modules as
  ``module.py``), functions as ``wing.module.function``;
* "Tests": folders as ``tests/name/``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, ROOT, prose

PAGE = DOCS / "architecture.md"
PACKAGE = ROOT / "django_sbert"
TESTS = ROOT / "tests"
SKIPPED = ("__pycache__", "migrations")


def section(title: str) -> str:
    """The text of the page's ``## title`` section, up to the next ``## `` heading."""
    text = prose(PAGE)
    head, found, rest = text.partition(f"\n## {title}\n")
    assert found, f"docs/architecture.md has no section '## {title}'"
    return rest.split("\n## ", 1)[0]


def spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def packages() -> dict[str, Path]:
    """Every package under django_sbert/ by its path from there (``django_sbert/``: the root)."""
    found = {"django_sbert/": PACKAGE}
    for init in PACKAGE.rglob("__init__.py"):
        folder = init.parent
        if folder != PACKAGE and not set(folder.relative_to(PACKAGE).parts) & set(SKIPPED):
            found[f"{folder.relative_to(PACKAGE).as_posix()}/"] = folder
    return found


def contents(folder: Path) -> set[str]:
    """What an item must name: the folder's modules and the packages in it (not the root's)."""
    modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    if folder == PACKAGE:
        return modules
    inner = {
        f"{p.parent.name}/" for p in folder.glob("*/__init__.py") if p.parent.name not in SKIPPED
    }
    return modules | inner


def items() -> dict[str, set[str]]:
    """The "Every module" list: each item's package and the modules and packages it names."""
    found: dict[str, set[str]] = {}
    text = section("Every module")
    for match in re.finditer(r"^- `([\w/]+/)`:(.*?)(?=^- |\Z)", text, re.MULTILINE | re.DOTALL):
        assert match[1] not in found, f"two items for {match[1]}"
        named = [s for s in spans(match[2]) if re.fullmatch(r"\w+\.py|\w+/", s)]
        found[match[1]] = set(named)
    return found


def test_every_package_has_an_item_and_every_item_a_package() -> None:
    listed, present = set(items()), set(packages())
    assert sorted(present - listed) == [], "packages docs/architecture.md does not list"
    assert sorted(listed - present) == [], "docs/architecture.md lists packages that are gone"


@pytest.mark.parametrize("package", sorted(packages()))
def test_each_item_names_every_module_of_its_package(package: str) -> None:
    named = items().get(package)
    if named is None:
        pytest.skip(f"no item for {package} (the test above fails)")
    present = contents(packages()[package])
    assert sorted(present - named) == [], f"{package}: docs/architecture.md does not name these"
    assert sorted(named - present) == [], f"{package}: docs/architecture.md names what is gone"


def flows() -> dict[str, str]:
    text = section("The flows")
    parts = re.split(r"^### +(.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def resolves(dotted: str) -> bool:
    """``wing.module.function`` (or ``wing.function``) names something importable."""
    parts = f"django_sbert.{dotted}".split(".")
    for end in range(len(parts), 1, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for name in parts[end:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_the_flows_are_there() -> None:
    assert "A visitor's search teaches the encoder" in flows()
    assert len(flows()) >= 4


@pytest.mark.parametrize("flow", sorted(flows()))
def test_each_flow_names_modules_and_functions_that_exist(flow: str) -> None:
    named = spans(flows()[flow])
    modules = [s for s in named if re.fullmatch(r"(?:\w+/)*\w+\.py", s)]
    assert len(modules) >= 3, f"flow '{flow}' names fewer than three modules"
    missing = [m for m in modules if not (PACKAGE / m).is_file()]
    assert missing == [], f"flow '{flow}' names modules that do not exist"
    roots = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir()}
    dotted = [
        s
        for s in named
        if re.fullmatch(r"\w+(?:\.\w+)+", s) and s.split(".")[0] in roots and s not in modules
    ]
    unresolved = [d for d in dotted if not resolves(d)]
    assert unresolved == [], f"flow '{flow}' names functions that do not exist"


def folders_with_tests() -> list[str]:
    """Folders holding tests (at any depth), and every package directly under tests/."""
    found = {p.parent for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts}
    found |= {p.parent for p in TESTS.glob("*/__init__.py")}
    return sorted(f"{p.relative_to(ROOT).as_posix()}/" for p in found if p != TESTS)


def test_every_test_folder_is_named_and_every_named_one_exists() -> None:
    text = prose(PAGE)
    named = set(re.findall(r"`(tests/[\w/.]+)`", text))
    folders = [f for f in folders_with_tests() if f"`{f}`" not in text]
    assert folders == [], "test folders docs/architecture.md does not name"
    gone = sorted(n for n in named if not (ROOT / n).exists())
    assert gone == [], "docs/architecture.md names test paths that do not exist"
