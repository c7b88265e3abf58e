"""benchmarks/README.md against the folder, both read at test time: its scripts table names
every benchmark (a module that prints the CPU line, ``common.cpu_line()``), its helpers table
every other module and package, neither names what is not there, and its links and commands
hold. A new script, a renamed one or a new helper makes these fail with its name."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from tests.docs.pages import ROOT, anchors, prose

FOLDER = ROOT / "benchmarks"
README = FOLDER / "README.md"


def calls_cpu_line(path: Path) -> bool:
    """Whether the module calls ``cpu_line()`` without defining it (``common`` defines it)."""
    tree = ast.parse(path.read_text())
    defines = any(
        isinstance(node, ast.FunctionDef) and node.name == "cpu_line" for node in tree.body
    )
    calls = any(
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "cpu_line")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "cpu_line")
        )
        for node in ast.walk(tree)
    )
    return calls and not defines


def modules() -> tuple[set[str], set[str]]:
    """(benchmarks, helpers) of the folder: modules by name, packages as ``name/``."""
    scripts, helpers = set(), set()
    for path in FOLDER.glob("*.py"):
        if path.name != "__init__.py":
            (scripts if calls_cpu_line(path) else helpers).add(path.stem)
    helpers |= {f"{p.parent.name}/" for p in FOLDER.glob("*/__init__.py")}
    return scripts, helpers


def table(after: str) -> set[str]:
    """The names in the first column of the README's table that follows the line ``after``."""
    text = README.read_text()
    head, found, rest = text.partition(after)
    assert found, f"benchmarks/README.md has no line starting {after!r}"
    rows = rest.split("\n\n", 2)[1] if rest.startswith("\n\n") else rest.split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([\w/]+)` \|", rows, re.MULTILINE))


def test_the_scripts_table_names_every_benchmark_and_nothing_else() -> None:
    scripts, _ = modules()
    named = table("| Script |")
    assert len(scripts) > 20, "the CPU line rule found too few benchmarks"
    assert sorted(scripts - named) == [], "scripts benchmarks/README.md does not list"
    assert sorted(named - scripts) == [], "benchmarks/README.md lists scripts that are not there"


def test_the_helpers_table_names_every_other_module_and_nothing_else() -> None:
    _, helpers = modules()
    named = table("Helpers (not benchmarks):")
    assert sorted(helpers - named) == [], "helpers benchmarks/README.md does not list"
    assert sorted(named - helpers) == [], "benchmarks/README.md lists helpers that are not there"


def test_links_resolve_to_pages_and_anchors() -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(README)):
        path, _, anchor = target.partition("#")
        linked = (FOLDER / path).resolve()
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == [], "benchmarks/README.md links to missing files or anchors"


def test_each_row_runs_its_own_script() -> None:
    """Each row's quick-look command runs the row's script, a module that exists."""
    commands = dict(
        re.findall(r"^\| `(\w+)` \|.*\| `python -m ([\w.]+)[^`]*` \|$", README.read_text(), re.M)
    )
    assert set(commands) == table("| Script |"), "rows without a quick-look command"
    wrong = [
        f"{name}: python -m {module}"
        for name, module in commands.items()
        if module != f"benchmarks.{name}" or importlib.util.find_spec(module) is None
    ]
    assert wrong == []
