"""One exception family: every exception a user may catch is a ``SbertError``, importable from
``django_sbert.exceptions``, and keeps the base that older ``except`` clauses name."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from django_sbert import exceptions
from django_sbert.exceptions import SbertError

PACKAGE = Path(exceptions.__file__).parent


def _modules_with_all() -> list[str]:
    """Every package of django_sbert, and every module that declares ``__all__`` (read from
    the source, so nothing is imported to find them)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "migrations" in parts or (
            path.name != "__init__.py" and "__all__" not in path.read_text()
        ):
            continue
        tree = ast.parse(path.read_text())
        declares = any(
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "__all__" for t in node.targets)
            for node in tree.body
        )
        if declares:
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _exported_exceptions() -> dict[str, type[BaseException]]:
    """``"module.Name"``: each exception class a module of django_sbert lists in ``__all__``."""
    classes = {}
    for name in _modules_with_all():
        try:
            module = importlib.import_module(name)
        except ImportError:
            if name.startswith(("django_sbert.api", "django_sbert.contrib.")):
                continue  # an extra that is not installed here: nothing of it can be raised
            raise
        for public in module.__all__:
            value = getattr(module, public)
            if inspect.isclass(value) and issubclass(value, BaseException):
                classes[f"{name}.{public}"] = value
    return classes


def test_the_walk_finds_the_wings_exceptions():
    found = _exported_exceptions()
    assert found["django_sbert.feedback.EventRefused"] is exceptions.EventRefused
    assert found["django_sbert.finetuning.RollbackForbidden"] is exceptions.RollbackForbidden
    assert "django_sbert.api.NotRegistered" in found
    assert {name.rpartition(".")[0] for name in found} >= {
        "django_sbert.exceptions",
        "django_sbert.feedback",
        "django_sbert.finetuning",
        "django_sbert.api",
    }


def test_every_exception_a_package_exports_is_an_sbert_error_in_the_family():
    """Any exception class in any ``__all__`` of the package is a ``SbertError`` and the very
    class ``django_sbert.exceptions`` names: one ``except`` clause and one import for all."""
    strays = [
        path
        for path, cls in _exported_exceptions().items()
        if not issubclass(cls, SbertError)
        or getattr(exceptions, cls.__name__, None) is not cls
        or cls.__name__ not in exceptions.__all__
    ]
    assert strays == []


@pytest.mark.parametrize("name", exceptions.__all__)
def test_every_listed_class_is_an_sbert_error(name):
    assert issubclass(getattr(exceptions, name), SbertError)


@pytest.mark.parametrize(
    ("name", "home", "base"),
    [
        ("RunConflict", "django_sbert.finetuning.runs", Exception),
        ("PromotionRefused", "django_sbert.finetuning.promotion", Exception),
        ("RollbackForbidden", "django_sbert.finetuning.promotion", Exception),
        ("RollbackForbidden", "django_sbert.finetuning", Exception),
        ("EventRefused", "django_sbert.feedback", Exception),
        ("EventRefused", "django_sbert.feedback.events", Exception),
        ("InvalidToken", "django_sbert.feedback", ValueError),
        ("InvalidToken", "django_sbert.feedback.tokens", ValueError),
        ("OnnxUnavailable", "django_sbert.encoder.onnx_query", RuntimeError),
        ("PairsImportError", "django_sbert.finetuning.pairs", ValueError),
        ("CompareError", "django_sbert.finetuning.compare", Exception),
        ("SearchTimeout", "django_sbert.query", OperationalError),
        ("SearchTimeout", "django_sbert.query.options", OperationalError),
        ("NotRegistered", "django_sbert.api", LookupError),
        ("NotRegistered", "django_sbert.api.registry", LookupError),
        ("AlreadyRegistered", "django_sbert.api", ImproperlyConfigured),
        ("MissingAPIDependencies", "django_sbert.api", ImportError),
        ("MissingAPIDependencies", "django_sbert.api", ImproperlyConfigured),
        ("UnsupportedModelError", "django_sbert.encoder", ValueError),
        ("UnsupportedModelError", "django_sbert.encoder.spec", ValueError),
        ("ModelNotFoundError", "django_sbert.encoder", LookupError),
        ("ModelNotFoundError", "django_sbert.encoder.spec", LookupError),
        ("TrainingCancelled", "django_sbert.encoder.training", Exception),
        ("PackageError", "django_sbert.encoder.aot", RuntimeError),
        ("ManifestError", "django_sbert.serving.storage", Exception),
        ("ServiceUnavailable", "django_sbert.exceptions", Exception),
        ("BrokerUnavailable", "django_sbert.exceptions", Exception),
        ("VersionUnavailable", "django_sbert.exceptions", Exception),
    ],
)
def test_user_facing_classes_are_one_class_wherever_imported(name, home, base):
    """The class raised where it was defined is the one ``django_sbert.exceptions`` names,
    so ``except SbertError`` and the old ``except ValueError`` (or ...) both catch it."""
    cls = getattr(exceptions, name)
    assert getattr(importlib.import_module(home), name) is cls
    assert issubclass(cls, SbertError) and issubclass(cls, base)
    assert name in exceptions.__all__


def test_search_timeout_is_unavailable_service_and_keeps_its_seconds():
    error = exceptions.SearchTimeout("too slow", seconds=2.5)
    assert isinstance(error, exceptions.ServiceUnavailable) and error.seconds == 2.5
