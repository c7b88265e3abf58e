"""``EmbeddingField(passages=...)`` as a field: its config, check E013, the passage model it
makes, migrations, and how many passages one row may hold."""

from __future__ import annotations

import pytest
from django.db import models
from django.test.utils import isolate_apps

from django_sbert.fields import EmbeddingField
from django_sbert.passages import PassageConfig, passage_limit
from django_sbert.passages import config as passage_config
from tests.testapp.models import Article, Report


@isolate_apps("tests.testapp")
def test_passages_true_makes_a_passage_model_with_an_hnsw_index():
    class Story(models.Model):
        text = models.TextField()
        body_vec = EmbeddingField(source=("text",), passages=True)

        class Meta:
            app_label = "testapp"

    field = Story._meta.get_field("body_vec")
    model = field.passage_model
    assert field.has_passages and model.__name__ == "StoryBodyVecPassage"
    assert model._meta.app_label == "testapp"
    assert [f.name for f in model._meta.concrete_fields] == [
        "id", "row", "ordinal", "start", "end", "text", "vector",
    ]  # fmt: skip
    assert model._meta.get_field("row").remote_field.model is Story
    (index,) = model._meta.indexes
    assert index.fields == ["vector"] and index.opclasses == ["vector_cosine_ops"]
    assert len(index.name) <= 30
    assert field.passage_config == PassageConfig()
    assert Story().body_vec_passages.model is model  # the reverse accessor
    assert field.check() == []


@isolate_apps("tests.testapp")
def test_without_passages_there_is_no_passage_model():
    class Plain(models.Model):
        text = models.TextField()
        vec = EmbeddingField(source=("text",))

        class Meta:
            app_label = "testapp"

    field = Plain._meta.get_field("vec")
    assert not field.has_passages and field.passage_model is None
    assert field.passage_config is None


@pytest.mark.parametrize(
    ("passages", "message"),
    [
        ({"max_tokens": 64}, "passages must be True, False or a PassageConfig"),
        (PassageConfig(max_tokens=1), "max_tokens must be an integer >= 2"),
        (PassageConfig(max_tokens=32, overlap=32), "overlap (32) must be smaller"),
        (PassageConfig(overlap=-1), "overlap must be an integer >= 0"),
        (PassageConfig(max_passages=0), "max_passages must be an integer >= 1"),
        (PassageConfig(document="last"), "document must be one of"),
    ],
)
def test_e013_reports_bad_passage_settings(passages, message):
    @isolate_apps("tests.testapp")
    def build():
        class Bad(models.Model):
            text = models.TextField()
            vec = EmbeddingField(source=("text",), passages=passages)

            class Meta:
                app_label = "testapp"

        return Bad._meta.get_field("vec").check()

    errors = [e for e in build() if e.id == "django_sbert.E013"]
    assert len(errors) == 1 and message in errors[0].msg


def test_deconstruct_writes_passages_only_when_set():
    _, _, _, kwargs = Report._meta.get_field("embedding").deconstruct()
    assert kwargs["passages"] == PassageConfig(max_tokens=24, overlap=6)
    _, _, _, plain = Article._meta.get_field("embedding").deconstruct()
    assert "passages" not in plain
    assert EmbeddingField(source=("a",), passages=True).deconstruct()[3]["passages"] is True


def test_max_passages_holds_the_text_of_max_chunks_windows(monkeypatch):
    # The tiny model reads 64 tokens; MAX_CHUNKS is 64: 64 x 64 tokens, 18 new ones each.
    config = PassageConfig(max_tokens=24, overlap=6)
    assert passage_limit(config, "default") == 228  # ceil(4096 / 18)
    assert passage_limit(PassageConfig(max_passages=5), "default") == 5
    assert passage_limit(PassageConfig(max_tokens=None, overlap=0), "default") == 64
    monkeypatch.setattr(passage_config, "MAX_CHUNKS", 2)
    assert passage_limit(config, "default") == 8  # ceil(128 / 18)
