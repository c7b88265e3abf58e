"""Fixtures of the REST API tests: users of each role, embedded articles, registrations."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from django_sbert.api import registry
from tests.testapp.models import Article

pytestmark = pytest.mark.django_db

ARTICLES = [  # lower case words of the tiny test model's vocabulary, so vectors differ
    ("central banks raise interest rates", "the economy is slow as rates rise", "economy"),
    ("interest rates fall", "money is cheap and the market is high", "economy"),
    ("tax and the government", "the minister and the tax on prices", "economy"),
    ("cats and dogs", "a cat and a dog in the city", "pets"),
    ("the dog runs fast", "a big dog is running in the country", "pets"),
    ("guitar music", "a man is playing the guitar", "music"),
    ("the election vote", "people vote for a new president", "politics"),
    ("court and law", "the court and the new law", "politics"),
]


@pytest.fixture(autouse=True)
def _isolated_api_state() -> Iterator[None]:
    """Every test starts with no registrations, empty throttle counts and query cache."""
    from django_sbert import serving

    saved = dict(registry._entries)
    registry.clear()
    cache.clear()
    serving.cache._query_cache.clear()
    yield
    registry.clear()
    registry._entries.update(saved)
    cache.clear()


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


def _user(username: str, **flags: bool) -> User:
    return User.objects.create_user(username, **flags)  # no password: no slow hashing


@pytest.fixture
def users(db) -> dict[str, User | None]:
    """One user per role: anonymous (None), user, staff without and with view_article, a
    plain user with view_article (viewer), superuser."""
    view_article = Permission.objects.get(codename="view_article")
    viewer = _user("viewer")
    viewer.user_permissions.add(view_article)
    staff_viewer = _user("staff_viewer", is_staff=True)
    staff_viewer.user_permissions.add(view_article)
    return {
        "anonymous": None,
        "user": _user("user"),
        "staff": _user("staff", is_staff=True),
        "viewer": viewer,
        "staff_viewer": staff_viewer,
        "superuser": User.objects.create_superuser("root", email=None, password=None),
    }


@pytest.fixture
def client_as(users) -> Callable[[str], APIClient]:
    def _client(role: str) -> APIClient:
        client = APIClient()
        if users[role] is not None:
            client.force_authenticate(users[role])
        return client

    return _client


def store_vector(obj: Article, vector: np.ndarray) -> None:
    """Store ``vector`` as ``obj``'s embedding, with the bookkeeping the indexing task writes."""
    from django_sbert.fields import embedding_fields
    from django_sbert.serving import encoder_version

    field = embedding_fields(type(obj))[0]
    text = field.get_source_text(obj)
    type(obj)._base_manager.filter(pk=obj.pk).update(
        **{
            field.attname: vector,
            field.hash_field_name: field.text_hash(text),
            field.version_field_name: encoder_version(field.encoder),
            field.updated_at_field_name: timezone.now(),
        }
    )
    obj.refresh_from_db()


def plant(obj: Article, text: str) -> None:
    """Give ``obj`` the real encoder's vector of ``text``: searching ``text`` finds it first."""
    from django_sbert.serving import encode_texts

    store_vector(obj, encode_texts([text])[0])


@pytest.fixture
def articles(db) -> list[Article]:
    """Eight articles in four categories, the last one unpublished, each with a vector.

    The tiny random test encoder maps many different texts to (nearly) the same vector, so a
    ranking of its vectors would be all ties. The rows get well-spread seeded random unit
    vectors of the encoder's width instead; tests that search a text ``plant()`` the encoder's
    own vector of that text on one row.
    """
    from django_sbert.serving import encoder_dimensions

    rng = np.random.default_rng(7)
    rows = []
    for i, (title, body, category) in enumerate(ARTICLES):
        row = Article.objects.create(
            title=title, body=body, category=category, published=i != len(ARTICLES) - 1
        )
        vector = rng.standard_normal(encoder_dimensions()).astype(np.float32)
        store_vector(row, vector / np.linalg.norm(vector))
        rows.append(row)
    return rows


@pytest.fixture
def registered() -> Callable[..., object]:
    """Register Article with the given options (fields=["id", "title", "category"] default)."""

    def _register(**options: object) -> object:
        if "fields" not in options and "serializer_class" not in options:
            options["fields"] = ["id", "title", "category"]
        return registry.register(Article, **options)

    return _register
