"""Migration operations for embedding columns.

``SetVectorStorage`` keeps a vector column's values in the row instead of PostgreSQL's TOAST
table (docs/deployment.md, "Vector storage")::

    from django_sbert.operations import SetVectorStorage

    class Migration(migrations.Migration):
        dependencies = [("blog", "0003_article_embedding")]
        operations = [SetVectorStorage("article", "embedding", "main")]

The table and column names come from the migration state, so the operation survives
``db_table`` and ``db_column`` settings; it changes no model state, and its reverse restores the
storage the column's type declares (``EXTERNAL`` for pgvector's).
"""

from __future__ import annotations

from typing import Any

from django.db import NotSupportedError
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

STORAGES = ("plain", "main", "external", "extended")


class SetVectorStorage(Operation):
    """``ALTER TABLE ... ALTER COLUMN ... SET STORAGE`` for one field of a model.

    ``storage`` is one of PostgreSQL's column storages (``"main"``, ``"external"``,
    ``"extended"``, ``"plain"``). It applies to values written afterwards: re-embed
    (``manage.py sbert_reindex``) to move the vectors already stored.
    """

    reversible = True
    reduces_to_sql = True

    def __init__(self, model_name: str, name: str, storage: str = "main") -> None:
        if storage.lower() not in STORAGES:
            raise ValueError(
                f"SetVectorStorage: storage {storage!r} is not one of PostgreSQL's column "
                f"storages ({', '.join(STORAGES)}); 'main' keeps vectors in the row"
            )
        self.model_name = model_name
        self.name = name
        self.storage = storage.lower()

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"model_name": self.model_name, "name": self.name, "storage": self.storage}
        return (self.__class__.__qualname__, [], kwargs)

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        """Storage is not part of Django's model state: nothing to change."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        self._set(app_label, schema_editor, to_state, self.storage)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        self._set(app_label, schema_editor, to_state, None)

    def describe(self) -> str:
        return f"Set storage {self.storage.upper()} on {self.model_name}.{self.name}"

    @property
    def migration_name_fragment(self) -> str:
        return f"{self.model_name.lower()}_{self.name.lower()}_storage_{self.storage}"

    def _set(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        state: ProjectState,
        storage: str | None,
    ) -> None:
        """Set ``storage``, or with ``None`` the storage the column's type declares."""
        model = state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return  # a database the routers keep this model off
        if schema_editor.connection.vendor != "postgresql":
            raise NotSupportedError(
                "SetVectorStorage needs PostgreSQL (column storage is PostgreSQL's own)"
            )
        table = model._meta.db_table
        column = model._meta.get_field(self.name).column
        quote = schema_editor.quote_name
        if storage is None:
            storage = _type_storage(schema_editor, table, column)
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} ALTER COLUMN {quote(column)} SET STORAGE {storage.upper()}"
        )


# pg_type.typstorage codes.
_STORAGE_CODES = {"p": "plain", "m": "main", "e": "external", "x": "extended"}


def _type_storage(schema_editor: BaseDatabaseSchemaEditor, table: str, column: str) -> str:
    """The storage declared by the type of ``table.column`` (pgvector's: ``external``)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.typstorage FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attname = %s",
            [schema_editor.quote_name(table), column],
        )
        row = cursor.fetchone()
    if row is None:
        raise ValueError(f"SetVectorStorage: no column {column!r} in table {table!r}")
    return _STORAGE_CODES[row[0]]
