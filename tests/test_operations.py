"""``SetVectorStorage`` on real PostgreSQL + pgvector: the column's storage changes, vectors
written afterwards stay in the row, and the reverse restores pgvector's storage."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, models
from django.db.migrations.state import ModelState, ProjectState
from django.db.migrations.writer import MigrationWriter
from pgvector.django import VectorField

from django_sbert.operations import SetVectorStorage

TABLE = "testapp_storedvectors"


def project_state() -> ProjectState:
    """A model of its own with 768-dimension vectors (3 kB: past the ~2 kB at which PostgreSQL
    moves values out of the row; the test encoder's are far smaller)."""
    fields = [
        ("id", models.BigAutoField(primary_key=True)),
        ("body", models.TextField()),
        ("embedding", VectorField(dimensions=768, db_column="vec")),
    ]
    project = ProjectState()
    project.add_model(ModelState("testapp", "StoredVectors", fields, {}))
    return project


def column_storage() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'vec'",
            [TABLE],
        )
        return cursor.fetchone()[0]


def toast_chunks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = %s::regclass", [TABLE]
        )
        toast = cursor.fetchone()[0]
        cursor.execute(f"SELECT count(*) FROM {toast}")
        return cursor.fetchone()[0]


def insert_wide_row() -> None:
    """A row past ~2 kB because of its vector."""
    vector = np.random.default_rng(0).standard_normal(768).astype(np.float32)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (body, vec) VALUES (%s, %s)",
            ["a short text", "[" + ",".join(map(str, vector)) + "]"],
        )


def apply(operation: SetVectorStorage, state: ProjectState, backwards: bool = False) -> None:
    with connection.schema_editor() as editor:
        if backwards:
            operation.database_backwards("testapp", editor, state, state)
        else:
            operation.database_forwards("testapp", editor, state, state)


def test_main_keeps_vectors_in_the_row_and_the_reverse_restores_external(transactional_db):
    state = project_state()
    operation = SetVectorStorage("storedvectors", "embedding", "main")
    with connection.schema_editor() as editor:
        editor.create_model(state.apps.get_model("testapp", "StoredVectors"))
    try:
        assert column_storage() == "e"  # pgvector's type default: out of line past ~2 kB
        insert_wide_row()
        out_of_line = toast_chunks()
        assert out_of_line > 0
        apply(operation, state)  # the column name comes from the state (db_column="vec")
        assert column_storage() == "m"
        insert_wide_row()
        assert toast_chunks() == out_of_line  # the second vector stayed in its row
        apply(operation, state, backwards=True)
        assert column_storage() == "e"
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")


def test_it_is_written_into_migrations_and_described():
    operation = SetVectorStorage("article", "embedding", "MAIN")
    name, args, kwargs = operation.deconstruct()
    assert (name, args) == ("SetVectorStorage", [])
    assert kwargs == {"model_name": "article", "name": "embedding", "storage": "main"}
    source, imports = MigrationWriter.serialize(operation)
    assert source.startswith("django_sbert.operations.SetVectorStorage(")
    assert "storage='main'" in source
    assert "import django_sbert.operations" in imports
    assert operation.describe() == "Set storage MAIN on article.embedding"
    assert operation.migration_name_fragment == "article_embedding_storage_main"
    assert operation.state_forwards("testapp", ProjectState()) is None


def test_an_unknown_storage_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'inline' is not one of .*plain, main, external"):
        SetVectorStorage("article", "embedding", "inline")
