"""The binary-quantized index of ``EmbeddingField(binary_index=True)``.

An HNSW index over each row's 1-bit code, ``binary_quantize(embedding)::bit(n)``, with
pgvector's ``bit_hamming_ops``: 1 bit per dimension instead of 32 (``vector``) or 16
(``halfvec``), so the graph is far smaller and faster to build; searches take the top
``k x oversample`` rows by Hamming distance and re-rank them by exact cosine distance
(query/binary.py, docs/scale.md).
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db.models import F, Func
from pgvector.django import BitField, HnswIndex

HAMMING_OPCLASS = "bit_hamming_ops"


class BinaryQuantize(Func):
    """``binary_quantize(vector)``: one bit per dimension, set where the value is positive."""

    function = "binary_quantize"
    output_field = BitField()


class BinaryCode(Func):
    """``(binary_quantize(<column>)::bit(n))``: the expression the binary index is built on, and
    the one a search orders by for PostgreSQL to use that index. Parenthesized whole, as an
    index expression that is not a plain function call must be."""

    template = "(binary_quantize(%(expressions)s)::bit(%(dimensions)s))"
    output_field = BitField()

    def __init__(self, expression: Any, dimensions: int, **extra: Any) -> None:
        super().__init__(expression, dimensions=int(dimensions), **extra)


def binary_code(attname: str, dimensions: int) -> BinaryCode:
    """The binary code of the column ``attname`` (``dimensions`` bits)."""
    return BinaryCode(F(attname), dimensions)


def binary_index_name(label_lower: str, field_name: str) -> str:
    """A stable index name within Django's 30 characters, e.g. ``sbert_bq_1a2b3c4d5e``."""
    key = f"{label_lower}.{field_name}".encode()
    return f"sbert_bq_{hashlib.sha256(key).hexdigest()[:10]}"


class BinaryQuantizedIndex(HnswIndex):
    """``CREATE INDEX ... USING hnsw ((binary_quantize(<column>)::bit(n)) bit_hamming_ops)``.

    ``n`` is ``dimensions``, or the field's own size when the index is created (read from its
    encoder, like the column's type), so a migration does not freeze the test model's width.
    Django writes an operator class for an index expression only through
    ``django.contrib.postgres``'s ``OpClass`` when that app is installed; this index writes its
    expression and operator class itself, so it needs no extra app.
    """

    def __init__(
        self, *, field: str, name: str, dimensions: int | None = None, **kwargs: Any
    ) -> None:
        self.field_name = field
        self.dimensions = None if dimensions is None else int(dimensions)
        super().__init__(fields=[field], name=name, **kwargs)

    def deconstruct(self) -> tuple[Any, Any, Any]:
        path, args, kwargs = super().deconstruct()
        kwargs.pop("fields", None)
        kwargs["field"] = self.field_name
        if self.dimensions is not None:
            kwargs["dimensions"] = self.dimensions
        return path, args, kwargs

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        statement = super().create_sql(model, schema_editor, using=using, **kwargs)
        field = model._meta.get_field(self.field_name)
        dimensions = self.dimensions or field.get_dimensions()
        column = schema_editor.quote_name(field.column)
        statement.parts["columns"] = (
            f"(binary_quantize({column})::bit({dimensions})) {HAMMING_OPCLASS}"
        )
        return statement


def binary_index(attname: str, name: str, dimensions: int | None = None) -> HnswIndex:
    """The HNSW index (Hamming distance) over the binary codes of the column ``attname``."""
    return BinaryQuantizedIndex(field=attname, name=name, dimensions=dimensions)
