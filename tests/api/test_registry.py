"""register(): only what a developer lists is exposed, and mistakes fail at start-up, clearly."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated

from django_sbert import api
from django_sbert.api.registry import as_semantic
from django_sbert.query import SemanticQuerySet
from tests.testapp.models import Article, Author, Note

pytestmark = pytest.mark.django_db


def test_register_builds_a_read_only_serializer_of_the_listed_fields():
    entry = api.register(Article, fields=["id", "title"])
    assert entry.label == "testapp.article"
    assert api.registry.get("testapp.Article") is entry
    serializer = entry.serializer_class(Article(id=1, title="t", body="secret"))
    assert serializer.data == {"id": 1, "title": "t"}
    assert all(field.read_only for field in entry.serializer_class().fields.values())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs fields=[...]"),
        ({"fields": []}, "is empty"),
        ({"fields": "__all__"}, "must be a list of field names"),
        ({"fields": "title"}, "must be a list of field names"),
        ({"fields": ["title", "no_such_field"]}, "no_such_field"),
        ({"fields": ["title", "embedding"]}, "include the EmbeddingField"),
        ({"fields": ["id"], "serializer_class": serializers.Serializer}, "got both"),
        ({"serializer_class": dict}, "must be a DRF Serializer class"),
        ({"fields": ["id"], "permission_classes": IsAuthenticated}, "list of permission"),
        ({"fields": ["id"], "permission_classes": [IsAuthenticated()]}, "list of permission"),
        ({"fields": ["id"], "queryset": [1, 2]}, "must be a QuerySet, a Manager or a callable"),
    ],
)
def test_mistakes_are_reported_with_what_to_do(kwargs, message):
    with pytest.raises(ImproperlyConfigured, match=message.replace("[", r"\[")):
        api.register(Article, **kwargs)
    assert not api.registry.is_registered(Article)


def test_models_without_embedding_field_cannot_be_registered():
    with pytest.raises(ImproperlyConfigured, match="has no EmbeddingField"):
        api.register(Author, fields=["name"])


def test_register_takes_a_model_class():
    with pytest.raises(TypeError, match="takes a model class"):
        api.register(Article(), fields=["id"])


def test_registering_twice_is_an_error_until_unregistered():
    api.register(Article, fields=["id"])
    with pytest.raises(api.AlreadyRegistered, match="unregister"):
        api.register(Article, fields=["title"])
    api.unregister(Article)
    api.register(Article, fields=["title"])
    with pytest.raises(api.NotRegistered):
        api.unregister(Note)


def test_unknown_label_lists_the_searchable_models():
    api.register(Article, fields=["id"])
    with pytest.raises(api.NotRegistered, match="Searchable models: testapp.article"):
        api.registry.get("testapp.note")


def test_queryset_sources(rf):
    request = rf.get("/")
    assert api.register(Article, fields=["id"]).get_queryset(request).model is Article
    api.unregister(Article)
    entry = api.register(Article, fields=["id"], queryset=Article.objects)
    assert isinstance(entry.get_queryset(request), SemanticQuerySet)
    api.unregister(Article)
    entry = api.register(Article, fields=["id"], queryset=lambda request: "oops")
    with pytest.raises(ImproperlyConfigured, match="returned str"):
        entry.get_queryset(request)
    api.unregister(Article)
    entry = api.register(Article, fields=["id"], queryset=Note.objects.all())
    with pytest.raises(ImproperlyConfigured, match="holds testapp.Note rows"):
        entry.get_queryset(request)


def test_as_semantic_keeps_the_filters_of_a_plain_queryset(articles):
    from django.db.models import QuerySet

    plain = QuerySet(model=Article).filter(category="pets")
    semantic = as_semantic(plain)
    assert isinstance(semantic, SemanticQuerySet)
    assert sorted(semantic.values_list("pk", flat=True)) == [articles[3].pk, articles[4].pk]
    assert len(semantic.similar_to("dog")) == 2
