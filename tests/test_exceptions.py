"""One exception family: every exception a user may catch is a ``SbertError``, importable from
``django_sbert.exceptions``, and keeps the base that older ``except`` clauses name."""

from __future__ import annotations

import importlib

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from django_sbert import exceptions
from django_sbert.exceptions import SbertError


@pytest.mark.parametrize("name", exceptions.__all__)
def test_every_listed_class_is_an_sbert_error(name):
    assert issubclass(getattr(exceptions, name), SbertError)


@pytest.mark.parametrize(
    ("name", "home", "base"),
    [
        ("RunConflict", "django_sbert.finetuning.runs", Exception),
        ("PromotionRefused", "django_sbert.finetuning.promotion", Exception),
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
