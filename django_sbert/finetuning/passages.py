"""The promotion's switch for a field with ``passages=``: passages change version with their rows.

``promotion._switch_field`` calls ``switch_passages`` inside the switch transaction (the
encoder's switch lock held exclusively), before it copies the staged row vectors into the live
columns. In the same transaction, so every reader sees either the old rows with the old
passages or the new rows with the new passages:

1. the live passages of rows that carry the serving (old) version become the rollback copy in
   ``StagedPassage``, as the old row vectors become theirs in ``StagedEmbedding``;
2. the live passages of every row that has a staged vector of the new version are replaced by
   its staged passages (rows deleted since they were staged are left out);
3. staged passages of every other version of the field are dropped, as the row vectors' are.

A row switched without staged passages (staged before the field had passages) is left without
passages, so it is stale and the sweep embeds it again: no row ever serves with passages of
another version than its vector. Rewriting the passage table costs about what building its
HNSW index costs (docs/passages.md).
"""

from __future__ import annotations

from django.db import connections

from ..indexing import FieldRef
from ..indexing.refs import content_type_id
from ..models import StagedEmbedding, StagedPassage


def switch_passages(ref: FieldRef, old: str, new: str) -> int:
    """Swap the field's live passages for the staged ``new`` ones (keeping the ``old`` ones
    staged for rollback); returns how many passages went live. Call inside the switch."""
    model = ref.field.passage_model
    if model is None:
        return 0
    connection = connections[ref.db_alias]
    quote = connection.ops.quote_name
    opts = ref.model._meta
    column = {f.attname: quote(f.column) for f in opts.concrete_fields}
    table = quote(opts.db_table)
    pk = f"t.{quote(opts.pk.column)}"
    vec = f"t.{column[ref.field.attname]}"
    hash_ = f"t.{column[ref.hash_attname]}"
    ver = f"t.{column[ref.version_attname]}"
    passages = quote(model._meta.db_table)
    # The passage table's columns: row, ordinal, start, end, text, vector.
    row, ordinal, start, end, text, vector = (
        quote(model._meta.get_field(name).column)
        for name in ("row", "ordinal", "start", "end", "text", "vector")
    )
    staged = quote(StagedPassage._meta.db_table)
    staged_rows = quote(StagedEmbedding._meta.db_table)
    vector_type = model._meta.get_field("vector").db_type(connection)
    ct = content_type_id(ref)
    with connection.cursor() as cursor:
        # 1. The old version's live passages become the rollback copy.
        cursor.execute(
            f"DELETE FROM {staged} WHERE content_type_id = %s AND field = %s AND version = %s",
            [ct, ref.name, old],
        )
        cursor.execute(
            f"INSERT INTO {staged} (content_type_id, object_pk, field, version, ordinal, start, "
            f'"end", text, vector) SELECT %s, p.{row}::text, %s, %s, p.{ordinal}, p.{start}, '
            f"p.{end}, p.{text}, p.{vector}::vector FROM {passages} p "
            f"JOIN {table} t ON {pk} = p.{row} "
            f"WHERE {vec} IS NOT NULL AND {hash_} IS NOT NULL AND {ver} = %s",
            [ct, ref.name, old, old],
        )
        # 2. Rows with a staged vector of the new version get its staged passages.
        cursor.execute(
            f"DELETE FROM {passages} p USING {staged_rows} e WHERE e.content_type_id = %s "
            f"AND e.field = %s AND e.version = %s AND e.object_pk = p.{row}::text",
            [ct, ref.name, new],
        )
        cursor.execute(
            f"INSERT INTO {passages} ({row}, {ordinal}, {start}, {end}, {text}, {vector}) "
            f'SELECT {pk}, s.ordinal, s.start, s."end", s.text, s.vector::{vector_type} '
            f"FROM {staged} s JOIN {staged_rows} e ON e.content_type_id = s.content_type_id "
            "AND e.field = s.field AND e.version = s.version AND e.object_pk = s.object_pk "
            f"JOIN {table} t ON {pk}::text = s.object_pk "
            "WHERE s.content_type_id = %s AND s.field = %s AND s.version = %s",
            [ct, ref.name, new],
        )
        switched = cursor.rowcount
        # 3. Only the previous version's passages stay staged.
        cursor.execute(
            f"DELETE FROM {staged} WHERE content_type_id = %s AND field = %s AND version <> %s",
            [ct, ref.name, old],
        )
    return switched
