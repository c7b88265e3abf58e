"""EmbeddingField: schema, migrations, source text, hashes, numpy values in forms and fixtures."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django import forms
from django.core import serializers
from django.core.management import call_command
from django.db import connection, models
from django.db.migrations.state import ModelState, ProjectState
from django.test.utils import isolate_apps

from django_sbert.fields import (
    EmbeddingField,
    all_embedding_fields,
    embedding_fields,
    text_hash,
)
from tests.testapp.models import Article, Note, Product, product_text


def column_type(table: str, column: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = %s",
            [table, column],
        )
        return cursor.fetchone()[0]


# -- schema and migrations -------------------------------------------------------------------


@pytest.mark.django_db
def test_vector_column_takes_its_size_from_the_encoder_config():
    assert column_type("testapp_article", "embedding") == "vector(32)"
    assert column_type("testapp_article", "embedding_hash") == "character varying(64)"
    assert column_type("testapp_article", "embedding_updated_at") == "timestamp with time zone"


@pytest.mark.heavy
def test_dimensions_are_read_without_torch():
    import subprocess
    import sys

    code = (
        "import django, sys; django.setup();"
        "from tests.testapp.models import Article;"
        "print(Article._meta.get_field('embedding').get_dimensions(),"
        " 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
    ).stdout.split()
    assert out == ["32", "False"]


def test_defaults_and_deconstruct_emit_only_non_default_arguments():
    field = EmbeddingField(source=("title", "body"))
    assert (field.null, field.blank, field.editable) == (True, True, False)
    _, path, args, kwargs = field.deconstruct()
    assert path == "django_sbert.fields.EmbeddingField"
    assert args == [] and kwargs == {"source": ("title", "body")}

    custom = EmbeddingField(source="text", encoder="multilingual", dimensions=768, null=False)
    assert custom.deconstruct()[3] == {
        "source": "text",
        "encoder": "multilingual",
        "dimensions": 768,
        "null": False,
    }
    assert EmbeddingField(source=product_text).deconstruct()[3] == {"source": product_text}


def test_companion_columns_are_added_once_and_survive_migration_state():
    names = [f.name for f in Article._meta.local_fields]
    for suffix in ("", "_hash", "_version", "_updated_at"):
        assert names.count(f"embedding{suffix}") == 1
    # The autodetector sees them, and rendering the historical model does not add them twice.
    state = ModelState.from_model(Article)
    assert {"embedding_hash", "embedding_version", "embedding_updated_at"} <= set(state.fields)
    project = ProjectState()
    project.add_model(ModelState.from_model(Article._meta.get_field("author").related_model))
    project.add_model(state)
    rendered = project.apps.get_model("testapp", "Article")
    names = [f.name for f in rendered._meta.local_fields]
    assert names.count("embedding_hash") == 1


@isolate_apps("tests.testapp")
def test_abstract_parent_gives_each_child_its_own_companions():
    class Base(models.Model):
        text = models.TextField()
        vec = EmbeddingField(source=("text",))

        class Meta:
            abstract = True
            app_label = "testapp"

    class Child(Base):
        class Meta:
            app_label = "testapp"

    assert [f.name for f in Child._meta.local_fields].count("vec_hash") == 1
    assert not any(f.name == "vec_hash" for f in Base._meta.local_fields)


@pytest.mark.django_db
def test_makemigrations_sees_no_changes():
    out = io.StringIO()
    call_command("makemigrations", "testapp", "django_sbert", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_embedding_field_helpers():
    assert [f.name for f in embedding_fields(Article)] == ["embedding"]
    pairs = {(m._meta.label, f.name) for m, f in all_embedding_fields()}
    assert {("testapp.Article", "embedding"), ("testapp.Note", "embedding")} <= pairs
    assert ("testapp.Product", "embedding") in pairs


# -- source text and hashes ------------------------------------------------------------------


def test_source_text_from_fields_method_and_function():
    article = Article(title="Rates rise", body=None)
    field = Article._meta.get_field("embedding")
    assert field.source_fields == ("title", "body")
    assert field.get_source_text(article) == "Rates rise\n"

    note = Note(text="cats play", tags="pets")
    note_field = Note._meta.get_field("embedding")
    assert note_field.source_fields is None
    assert note_field.get_source_text(note) == "cats play\ntags: pets"

    product = Product(name="Guitar", description="six strings")
    product_field = Product._meta.get_field("embedding")
    assert product_field.source_fields is None
    assert product_field.get_source_text(product) == "Guitar. six strings"
    assert product_field.sql_text_hash_expression() is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("title", "body"),
    [
        ("Zinsen steigen: Zentralbank überrascht", "naïve café — 東京 📈 \t tabs"),
        ("only a title", ""),
        ("", ""),
    ],
)
def test_sql_hash_agrees_with_python_hash(title, body):
    field = Article._meta.get_field("embedding")
    article = Article.objects.create(title=title, body=body)
    expected = field.text_hash(field.get_source_text(article))
    sql_hash = (
        Article.objects.filter(pk=article.pk)
        .annotate(h=field.sql_text_hash_expression())
        .values_list("h", flat=True)
        .get()
    )
    assert sql_hash == expected == text_hash(f"{title}\n{body}")


# -- numpy values in full_clean, forms, dumpdata / loaddata ----------------------------------


@pytest.mark.django_db
def test_numpy_vector_passes_full_clean_and_round_trips():
    vector = np.linspace(-1, 1, 32, dtype=np.float32)
    article = Article(title="t", body="b", embedding=vector)
    article.full_clean()  # pgvector-python #21/#99: "truth value of an array is ambiguous"
    assert isinstance(article.embedding, list)
    article.save()
    article.refresh_from_db()
    assert np.allclose(article.embedding, vector, atol=1e-6)


@pytest.mark.django_db
def test_dumpdata_and_loaddata_round_trip_vectors(tmp_path):
    vector = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    article = Article.objects.create(title="t", body="b", embedding=vector)
    data = serializers.serialize("json", Article.objects.filter(pk=article.pk))
    payload = json.loads(data)[0]["fields"]
    assert isinstance(payload["embedding"], str) and payload["embedding"].startswith("[")

    fixture = tmp_path / "articles.json"
    fixture.write_text(data)
    Article.objects.all().delete()
    call_command("loaddata", str(fixture), verbosity=0)
    restored = Article.objects.get(pk=article.pk)
    assert np.allclose(restored.embedding, vector, atol=1e-6)


@pytest.mark.django_db
def test_model_form_with_editable_embedding_renders_and_saves():
    class ArticleForm(forms.ModelForm):
        embedding = Article._meta.get_field("embedding").formfield(required=False)

        class Meta:
            model = Article
            fields = ["title", "body"]

    vector = np.arange(32, dtype=np.float32) / 32
    article = Article.objects.create(title="t", body="b", embedding=vector)
    form = ArticleForm(instance=article, initial={"embedding": np.asarray(article.embedding)})
    html = form.as_p()
    assert "[0.0,0.03125," in html and "..." not in html  # full vector, not numpy's repr

    bound = ArticleForm(
        data={"title": "t2", "body": "b", "embedding": "[" + ",".join(["0.5"] * 32) + "]"},
        instance=article,
        initial={"embedding": np.asarray(article.embedding)},
    )
    assert bound.is_valid(), bound.errors
    assert bound.has_changed() and bound.cleaned_data["embedding"] == [0.5] * 32
    unchanged = ArticleForm(
        data={"title": "t", "body": "b", "embedding": form["embedding"].value()},
        instance=Article.objects.get(pk=article.pk),
        initial={"embedding": np.asarray(article.embedding)},
    )
    assert unchanged.is_valid(), unchanged.errors
    assert unchanged.changed_data == []

    invalid = ArticleForm(data={"title": "t", "body": "b", "embedding": "not a vector"})
    assert not invalid.is_valid() and "embedding" in invalid.errors


def test_embedding_is_not_editable_in_admin_forms_by_default():
    from django.forms import modelform_factory

    form_class = modelform_factory(Article, fields="__all__")
    assert "embedding" not in form_class.base_fields
    assert "embedding_hash" not in form_class.base_fields


@pytest.mark.heavy
def test_fresh_database_migrates_although_no_migration_orders_the_extension_first():
    """testapp's migration does not depend on django_sbert's: pre_migrate creates the extension."""
    import os
    import subprocess
    import sys
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    url = os.environ["DATABASE_URL"]
    name = f"fresh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        fresh_url = urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
        env = {**os.environ, "DATABASE_URL": fresh_url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
        result = subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--noinput"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        with psycopg.connect(fresh_url) as conn:
            assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
            typ = conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'testapp_article'::regclass AND attname = 'embedding'"
            ).fetchone()
            assert typ == ("vector(32)",)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("dimensions", [1, 8, 384])
def test_a_vector_literal_reads_back_as_the_same_float32_vector(db, dimensions):
    from django_sbert.fields.columns import vector_literal

    rng = np.random.default_rng(dimensions)
    vector = rng.standard_normal(dimensions).astype(np.float32) * np.float32(1e-3)
    vector[0] = np.float32(-0.0) if dimensions > 1 else np.float32(3.4e38)
    literal = vector_literal(vector)
    assert literal[0] + literal[-1] == "[]" and literal.count(",") == dimensions - 1
    with connection.cursor() as cursor:  # pgvector parses what every query and write sends
        cursor.execute("SELECT %s::vector::text", [literal])
        (stored,) = cursor.fetchone()
    assert np.array_equal(np.array(json.loads(stored), dtype=np.float32), vector)
