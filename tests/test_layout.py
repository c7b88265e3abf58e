"""The house rules of the package layout (docs/architecture.md), checked on the source.

* no import cycle inside ``django_sbert`` (an import inside a function counts: it is still a
  dependency), except a wing's ``enqueue`` calling its own tasks module;
* imports go down the floors (``FLOORS``): a module imports its own floor and those below;
* each wing's package docstring names every module of the wing;
* an import inside a function says why in a comment (torch, or Django's loading order);
* the ML core (``django_sbert.encoder``) imports nothing of Django;
* the documented import paths and Celery task names keep working.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_sbert"

# (importer, imported): a wing's enqueue function calling its own tasks module.
ALLOWED_LOOPS = {
    ("django_sbert.finetuning.runs", "django_sbert.finetuning.tasks"),
    ("django_sbert.finetuning.promotion", "django_sbert.finetuning.tasks"),
}


# The floors of docs/architecture.md, lowest first. A module's floor is that of the longest
# prefix listed here; it may import modules of its own floor and of those below it.
FLOOR_NAMES = ("encoder", "base", "serving", "indexing", "query", "finetuning", "top")
FLOORS = {
    "django_sbert.encoder": 0,  # the ML core: torch + transformers, no Django
    "django_sbert": 1,  # the package itself: the version only
    **dict.fromkeys(
        (
            "django_sbert.conf",
            "django_sbert.exceptions",
            "django_sbert.throttling",
            "django_sbert.models",
            "django_sbert.fields",
            "django_sbert.passages",
            "django_sbert.keyword",  # the tsvector column, the tsquery, BM25 and its statistics
            "django_sbert.indexes",
            "django_sbert.operations",
            "django_sbert.celery",
        ),
        1,
    ),
    "django_sbert.serving": 2,
    "django_sbert.indexing": 3,
    "django_sbert.query": 4,
    "django_sbert.finetuning": 5,
    "django_sbert.evaluation": 5,  # judgment lists and evaluations, beside finetuning
    "django_sbert.feedback": 5,  # the search log, events, and what is learned from them
    **dict.fromkeys(
        (
            "django_sbert.admin",
            "django_sbert.api",
            "django_sbert.management",
            "django_sbert.contrib",
            "django_sbert.checks",
            "django_sbert.apps",
            "django_sbert.views",
            "django_sbert.urls",
            "django_sbert.tasks",
            "django_sbert.templatetags",
        ),
        6,
    ),
}


def _floor(module: str) -> int | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in FLOORS and (end > 1 or module == prefix):
            return FLOORS[prefix]
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}


def _imports(name: str, path: Path, known: set[str]) -> list[tuple[str, ast.stmt, bool]]:
    """(imported module, node, inside a function) for every django_sbert import of a module."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    nested = {
        id(node)
        for parent in ast.walk(tree)
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(parent)
    }
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from . import x` imports the submodule x when there is one.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in targets:
            if target.startswith("django_sbert"):
                found.append((target, node, id(node) in nested))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _, _ in _imports(name, path, known):
            # Importing a.b.c runs a/__init__ and a/b/__init__ too.
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in known and prefix != name and not name.startswith(prefix + "."):
                    graph[name].add(prefix)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_except_a_wings_enqueue():
    graph = _graph()
    for importer, imported in ALLOWED_LOOPS:
        assert imported in graph[importer], f"stale allowance: {importer} -> {imported}"
        graph[importer].discard(imported)
    assert _cycles(graph) == []


ROOT_MODULES = 12  # files directly in django_sbert/, __init__.py included: the rest are wings
MODULE_LINES = 600
FUNCTION_LINES = 100


def test_the_root_stays_small_and_modules_and_functions_stay_readable():
    """At most ROOT_MODULES files at the root, MODULE_LINES lines per module and
    FUNCTION_LINES per function (docs/architecture.md): what grows past them is split by job."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES, f"{len(root)} root modules: {root}"
    long_modules, long_functions = [], []
    for name, path in _modules().items():
        source = path.read_text()
        if len(source.splitlines()) > MODULE_LINES:
            long_modules.append(name)
        for node in ast.walk(ast.parse(source)):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                long_functions.append(f"{name}.{node.name}")
    assert long_modules == [], f"modules over {MODULE_LINES} lines"
    assert long_functions == [], f"functions over {FUNCTION_LINES} lines"


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_has_a_floor():
    assert [name for name in _modules() if _floor(name) is None] == []


def _upward(imports: list[tuple[str, str, int]]) -> list[str]:
    """A sentence for each (importer, imported, line) that goes up from a lower floor."""
    found = []
    for importer, imported, lineno in imports:
        low, high = _floor(importer), _floor(imported)
        if low is not None and high is not None and high > low:
            found.append(
                f"{importer} (floor {low}, {FLOOR_NAMES[low]}) imports {imported} "
                f"(floor {high}, {FLOOR_NAMES[high]}) at line {lineno}: move what it needs "
                "down, or the module up"
            )
    return found


def test_imports_go_down_the_floors():
    modules = _modules()
    known = set(modules)
    imports = [
        (name, target, node.lineno)
        for name, path in modules.items()
        for target, node, _ in _imports(name, path, known)
    ]
    assert _upward(imports) == []


def test_the_checker_finds_an_import_that_goes_up():
    found = _upward(
        [
            ("django_sbert.fields", "django_sbert.serving.cache", 3),
            ("django_sbert.checks", "django_sbert.serving.model_cache", 4),
        ]
    )
    assert found == [
        "django_sbert.fields (floor 1, base) imports django_sbert.serving.cache (floor 2, "
        "serving) at line 3: move what it needs down, or the module up"
    ]


WINGS = sorted(
    path.parent.name
    for path in PACKAGE.glob("*/__init__.py")
    if path.parent.name not in ("management", "migrations")
)


@pytest.mark.parametrize("wing", WINGS)
def test_a_wings_docstring_names_each_of_its_modules(wing):
    folder = PACKAGE / wing
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    modules = sorted(path.stem for path in folder.glob("*.py") if path.stem != "__init__")
    missing = [m for m in modules if not re.search(rf"``(?:[\w.]+\.)?{m}``", docstring)]
    assert missing == [], f"django_sbert/{wing}/__init__.py does not name {', '.join(missing)}"


@pytest.mark.parametrize("wing", ["serving", "indexing"])
def test_a_wings_public_names_are_its_all_and_its_docstring_names_them(wing):
    package = importlib.import_module(f"django_sbert.{wing}")
    for name in package.__all__:
        assert getattr(package, name) is not None
        assert f"``{name}``" in package.__doc__, f"django_sbert.{wing} does not name {name}"


def test_the_maps_table_names_modules_that_exist():
    """docs/architecture.md's "which module for which change" names files by their path."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = text.split("## Which module for which change", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`((?:\w+/)*\w+\.py)`", table))
    assert named, "the table names no module"
    assert sorted(path for path in named if not (PACKAGE / path).is_file()) == []


def _explained(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or just above the block of imports it belongs to."""
    if "#" in lines[lineno - 1]:
        return True
    above = lineno - 2
    while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def test_imports_inside_functions_say_why():
    """Torch kept out of import time, or Django's loading order: a comment names the reason.

    The Django layer; the ML core (``encoder/``) keeps transformers, safetensors and friends
    out of import time as a rule of its own.
    """
    unexplained = []
    for name, path in _modules().items():
        if name.startswith("django_sbert.encoder"):
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom) and not _explained(
                    lines, node.lineno
                ):
                    unexplained.append(f"{name}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert unexplained == []


def test_the_encoder_core_imports_nothing_of_django():
    for name, path in _modules().items():
        if not name.startswith("django_sbert.encoder"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for module in modules:
                assert not module.startswith("django"), f"{name} imports {module}"
                assert not (node.__class__ is ast.ImportFrom and node.level > 1), name


@pytest.mark.heavy
def test_model_modules_and_settings_modules_import_no_torch():
    """What a project's models.py, settings.py and migrations import stays light."""
    code = (
        "import sys\n"
        "import django_sbert.celery\n"
        "import django\n"
        "django.setup()\n"
        "import django_sbert.fields, django_sbert.query, django_sbert.admin, django_sbert.tasks\n"
        "import django_sbert.api.urls\n"
        "from django.core.management import call_command\n"
        "call_command('check', verbosity=0)\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        cwd=PACKAGE.parent,
    )
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr


@pytest.mark.parametrize(
    "path",
    [
        "django_sbert.fields.EmbeddingField",
        "django_sbert.fields.text_hash",
        "django_sbert.query.SemanticManager",
        "django_sbert.query.SemanticQuerySet",
        "django_sbert.admin.EmbeddingAdminMixin",
        "django_sbert.tasks.embed_rows",
        "django_sbert.tasks.sweep",
        "django_sbert.tasks.train_encoder",
        "django_sbert.tasks.promote_version",
        "django_sbert.tasks.enqueue_embed",
        "django_sbert.tasks.enqueue_stale",
        "django_sbert.indexing.get_ref",
        "django_sbert.indexing.embed_pks",
        "django_sbert.indexing.bulk_load",
        "django_sbert.serving.encoder_version",
        "django_sbert.serving.encode_query",
        "django_sbert.serving.get_encoder",
        "django_sbert.serving.query_vector",
        "django_sbert.serving.serving_record",
        "django_sbert.celery.sweep_schedule",
        "django_sbert.celery.SWEEP_SCHEDULE",
        "django_sbert.celery.feedback_purge_schedule",
        "django_sbert.feedback.log_search",
        "django_sbert.feedback.log.normalize_query",
        "django_sbert.feedback.forget_user",
        "django_sbert.conf.sbert_settings",
        "django_sbert.encoder.SentenceEncoder",
        "django_sbert.encoder.training.fit",
        "django_sbert.encoder.metrics.retrieval_metrics",
        "django_sbert.encoder.evaluation.retrieval_metrics",  # deprecated, one release
        "django_sbert.api.register",
        "django_sbert.api.filters.SemanticSearchFilter",
    ],
)
def test_documented_import_paths_keep_working(path):
    module, _, attribute = path.rpartition(".")
    assert getattr(importlib.import_module(module), attribute) is not None


def test_task_names_are_the_wire_format_and_bind_to_the_moved_functions():
    from celery import current_app

    from django_sbert.finetuning import tasks as finetuning_tasks
    from django_sbert.indexing import tasks as indexing_tasks

    expected = {
        "django_sbert.embed_rows": indexing_tasks,
        "django_sbert.sweep": indexing_tasks,
        "django_sbert.train_encoder": finetuning_tasks,
        "django_sbert.promote_version": finetuning_tasks,
    }
    for name, module in expected.items():
        task = current_app.tasks[name]
        assert task.__module__ == module.__name__
        assert getattr(module, name.rpartition(".")[2]).name == name


@pytest.mark.parametrize("package", ["django_sbert.finetuning", "django_sbert.evaluation"])
def test_a_wings_face_gives_the_names_its_modules_define(package):
    """``from django_sbert.finetuning import create_run`` is the function ``runs`` defines: the
    face re-exports, never wraps; and importing the package loads none of its modules."""
    face = importlib.import_module(package)
    for name in face.__all__:
        value = getattr(face, name)
        home = getattr(value, "__module__", None)
        if home is not None and not isinstance(value, dict | tuple | list):
            assert home.startswith((package + ".", "django_sbert.exceptions")), (package, name)
            assert getattr(importlib.import_module(home), name) is value
    code = f"import sys, {package}\nprint([m for m in sys.modules if m.startswith('{package}.')])"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    assert result.stdout.strip() == "[]", result.stdout
