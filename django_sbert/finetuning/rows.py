"""The encoder's rows as the gate and the guard sample them.

``row_pool`` lists ``(index in refs, pk)`` for every field an encoder encodes (the first
``MINING_ROWS`` in primary-key order, as hard-negative mining reads them);
``pool_texts`` reads the source texts of a slice of it, one query per field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..indexing import FieldRef, field_refs, light_rows

MINING_ROWS = 50000  # stored rows a run mines hard negatives and draws distractors from


def row_pool(encoder_name: str) -> tuple[list[FieldRef], list[tuple[int, Any]]]:
    """The fields of ``encoder_name`` and ``(index in them, pk)`` of their first
    ``MINING_ROWS`` rows, in primary-key order."""
    refs = [ref for ref in field_refs() if ref.encoder_name == encoder_name]
    most = MINING_ROWS
    pool: list[tuple[int, Any]] = []
    for index, ref in enumerate(refs):
        room = most - len(pool)
        if room <= 0:
            break
        pks = ref.manager.order_by("pk").values_list("pk", flat=True)[:room]
        pool.extend((index, pk) for pk in pks)
    return refs, pool


def pool_texts(refs: Sequence[FieldRef], items: Sequence[tuple[int, Any]]) -> dict[Any, str]:
    """The text of each ``(ref index, pk)`` (a row's source text, stripped) or ``(-1, text)``."""
    texts: dict[Any, str] = {}
    by_ref: dict[int, list[Any]] = {}
    for index, key in items:
        if index < 0:
            texts[(index, key)] = key.strip()
        else:
            by_ref.setdefault(index, []).append(key)
    for index, pks in by_ref.items():
        ref = refs[index]
        for instance in light_rows(ref, ref.manager.filter(pk__in=pks)):
            texts[(index, instance.pk)] = ref.field.get_source_text(instance).strip()
    return texts


__all__ = ["pool_texts", "row_pool"]
