"""Binary-quantized search with re-ranking: the top ``k x oversample`` rows by Hamming distance
on 1-bit codes (an HNSW index on ``binary_quantize(embedding)::bit(n)``), re-ranked by exact
cosine distance, in one SQL statement (pgvector's documented pattern; docs/scale.md shows it).

Like hybrid search's derived table (fusion.py), the candidate sub-select is built when the query
is compiled, from the queryset's filters at that moment, so iterative index scans keep filling
a filtered top-k on the bit index. The re-rank calls ``cosine_distance()`` rather than ``<=>``:
a float HNSW index on the same column cannot serve a function, so the re-rank is always the
exact sort of the few candidates, never a second index scan.

Without a limit (``count()``, an unsliced ``iterator()``) every row the filters keep is a
candidate: exact, and as costly as a full scan.
"""

from __future__ import annotations

from typing import Any

from django.db.models import BooleanField, Expression, F, FloatField, Func
from pgvector.django import HammingDistance

from ..fields import EmbeddingField
from ..indexes import BinaryQuantize, binary_code
from .fusion import candidate_queryset
from .vectors import QuerySource, QueryVector


class CosineDistanceFunction(Func):
    """``cosine_distance(a, b)``: the same value as ``a <=> b``, which no index serves."""

    function = "cosine_distance"
    output_field = FloatField()


class BinaryCandidates(Expression):
    """``pk = ANY(ARRAY(<the top rows by Hamming distance among the queryset's rows>))``.

    ``limit`` is the number of candidates; None: ``oversample`` times the rows the compiled
    query asks for (its slice or ``k``), and every row when it asks for all of them.
    """

    conditional = True
    output_field = BooleanField()

    def __init__(
        self,
        field: EmbeddingField,
        vector: QueryVector,
        oversample: int,
        limit: int | None = None,
        pk: Any = None,
    ) -> None:
        super().__init__()
        self.embedding = field
        self.vector = vector
        self.oversample = int(oversample)
        self.limit = limit
        self.pk = F("pk") if pk is None else pk

    def get_source_expressions(self) -> list[Any]:
        return [self.pk]

    def set_source_expressions(self, exprs: list[Any]) -> None:
        (self.pk,) = exprs

    def candidates(self, high_mark: int | None) -> int | None:
        """How many rows the Hamming scan takes for a query asking for ``high_mark`` rows."""
        if self.limit is not None:
            return self.limit
        return None if high_mark is None else high_mark * self.oversample

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        rows = candidate_queryset(compiler.query, _is_binary_candidates)
        code = binary_code(self.embedding.attname, self.embedding.get_dimensions())
        hamming = HammingDistance(code, BinaryQuantize(self.vector))
        rows = rows.order_by(hamming).values("pk")
        limit = self.candidates(compiler.query.high_mark)
        if limit is not None:
            rows = rows[:limit]
        sql, params = rows.query.get_compiler(connection=connection).as_sql()
        pk_sql, pk_params = compiler.compile(self.pk)
        return f"{pk_sql} = ANY(ARRAY({sql}))", (*pk_params, *params)


def _is_binary_candidates(node: Any) -> bool:
    return isinstance(node, BinaryCandidates)


def reranked(
    field: EmbeddingField,
    literal: str,
    source: QuerySource | None,
    oversample: int,
    limit: int | None = None,
) -> tuple[BinaryCandidates, CosineDistanceFunction]:
    """The candidate condition and the exact distance that ranks the candidates."""
    vector = QueryVector(literal, source, field)
    distance = CosineDistanceFunction(F(field.attname), vector)
    return BinaryCandidates(field, vector, oversample, limit), distance
