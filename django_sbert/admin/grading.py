"""The work of the grading page (``JudgmentListAdmin.grade_view``): which rows a user may grade
(those of the model's own ModelAdmin, for staff who may view it), a query's top rows by the
serving version and by a candidate beside it, and the grades saved into a judgment list.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import HttpRequest
from django.urls import reverse

from ..exceptions import ServiceUnavailable
from ..finetuning import compare
from ..indexing import FieldRef, field_refs, get_ref
from ..indexing.passages import encode_with_passages
from ..indexing.rows import PendingRow
from ..models import EncoderVersion, JudgedQuery, Judgment, JudgmentList, VersionStatus
from ..query import as_semantic
from ..serving import encode_texts
from .mixins import viewing_admin

K = compare.K  # rows shown per version
POOL = 20  # the serving version's top rows a candidate re-ranks (its vectors are not stored)
GRADES = [
    ("", "-"),
    ("0", "0 not relevant"),
    ("1", "1 somewhat"),
    ("2", "2 relevant"),
    ("3", "3 perfect"),
]


def ref_key(ref: FieldRef) -> str:
    """``app_label.Model.field``: how the grading form names an EmbeddingField."""
    return f"{ref.label}.{ref.name}"


def ref_of_list(judgment_list: JudgmentList) -> FieldRef:
    """The EmbeddingField a list grades (``LookupError`` when it is gone from the code)."""
    model = judgment_list.content_type.model_class()
    if model is None:
        raise LookupError(f"The model of judgment list {judgment_list.name!r} is not installed.")
    return get_ref(model._meta.label, judgment_list.field)


def model_admin_for(admin_site: admin.AdminSite, request: HttpRequest, ref: FieldRef) -> Any:
    """The ModelAdmin of ``ref``'s model if ``request.user`` may view its rows there; else 403."""
    model_admin = viewing_admin(admin_site, request, ref.model)
    if model_admin is None:
        raise PermissionDenied(f"You may not view {ref.model._meta.verbose_name_plural} here.")
    return model_admin


def gradable_refs(admin_site: admin.AdminSite, request: HttpRequest) -> list[FieldRef]:
    """The EmbeddingFields whose model has an admin the user may view rows on."""
    return [ref for ref in field_refs() if viewing_admin(admin_site, request, ref.model)]


def row_url(admin_site: admin.AdminSite, request: HttpRequest, ref: FieldRef, row: Any) -> str:
    """The row's change page in the admin, when the user may open it."""
    model_admin = admin_site._registry.get(ref.model)
    if model_admin is None or not model_admin.has_view_or_change_permission(request, row):
        return ""
    opts = ref.model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk])


@dataclass
class GradedRow:
    """One row of a version's top list, with its rank and score on that side."""

    pk: str
    row: Any
    score: float
    first: bool  # shown with its grade here (False: the left column shows it too)
    rank_left: int | None = None  # its rank in the serving column, when it is there
    grade: int | None = None  # its grade for the query in the list, when graded
    url: str = ""  # its change page, when the user may open it


def grading_sides(
    ref: FieldRef, queryset: Any, query: str, candidate: str | None, k: int = K
) -> tuple[list[GradedRow], list[GradedRow] | None]:
    """The serving version's top ``k`` rows of ``queryset`` for ``query``, and ``candidate``'s
    top ``k`` of the serving version's top ``POOL`` (each row encoded here by the candidate as
    indexing would encode it: its vectors are not in the table before it is promoted).

    Raises ``compare.CompareError`` when the candidate's files cannot be loaded here, and
    ``ServiceUnavailable`` when search cannot run now.
    """
    pool = list(as_semantic(queryset).similar_to(query, k=max(POOL, k), field=ref.name))
    left = [GradedRow(str(r.pk), r, float(r.similarity), True) for r in pool[:k]]
    if not candidate:
        return left, None
    rows = [PendingRow(r.pk, ref.field.get_source_text(r) or "", "") for r in pool]
    try:
        asked = encode_texts([query], ref.encoder_name, candidate, role="query")
        vectors = _candidate_vectors(ref, rows, candidate)
    except LookupError as exc:
        raise compare.CompareError(f"No version {candidate} of {ref.encoder_name!r}.") from exc
    except (ServiceUnavailable, OSError) as exc:  # VersionUnavailable, files that do not load
        raise compare.CompareError(
            f"The files of version {candidate} cannot be loaded on this host: {exc}"
        ) from exc
    if not rows:
        return left, []
    query_vector = np.asarray(ref.field.fit_vectors(asked[0]), dtype=np.float32)  # (dim,)
    scores = np.asarray(vectors, dtype=np.float32) @ query_vector  # (pool,)
    ranks = {row.pk: n for n, row in enumerate(left, start=1)}
    right = []
    for i in np.argsort(-scores, kind="stable")[:k]:
        pk = str(pool[i].pk)
        right.append(GradedRow(pk, pool[i], float(scores[i]), pk not in ranks, ranks.get(pk)))
    return left, right


_ROW_VECTORS: OrderedDict[tuple[str, str, str, str], np.ndarray] = OrderedDict()
_ROW_VECTORS_LOCK = threading.Lock()
ROW_VECTORS_KEPT = 2000  # a candidate's row vectors kept per process: regrading reuses them


def _candidate_vectors(ref: FieldRef, rows: Sequence[PendingRow], version: str) -> np.ndarray:
    """The rows' vectors by ``version`` (pool, dim), encoded as indexing would; the last
    ``ROW_VECTORS_KEPT`` are kept per (version, field, row, text), so the page after saving
    grades, or another query over the same rows, encodes only the rows it has not seen."""
    keys = [(version, str(ref), str(row.pk), ref.field.text_hash(row.text)) for row in rows]
    with _ROW_VECTORS_LOCK:
        found = {key: _ROW_VECTORS[key] for key in keys if key in _ROW_VECTORS}
    missing = [(row, key) for row, key in zip(rows, keys, strict=True) if key not in found]
    if missing:
        vectors, _ = encode_with_passages(ref, [row for row, _ in missing], version=version)
        found.update(zip((key for _, key in missing), vectors, strict=True))
    with _ROW_VECTORS_LOCK:
        for key in keys:
            _ROW_VECTORS[key] = found[key]
            _ROW_VECTORS.move_to_end(key)
        while len(_ROW_VECTORS) > ROW_VECTORS_KEPT:
            _ROW_VECTORS.popitem(last=False)
    return np.asarray([found[key] for key in keys], dtype=np.float32).reshape(len(keys), -1)


def candidate_versions(encoder_name: str) -> list[str]:
    """The versions of ``encoder_name`` a grader can put beside the serving one, newest first."""
    return list(
        EncoderVersion.objects.filter(encoder_name=encoder_name, status=VersionStatus.CANDIDATE)
        .order_by("-created_at")
        .values_list("version", flat=True)
    )


def list_grades(judgment_list: JudgmentList, query: str) -> dict[str, int]:
    """Row pk -> grade of ``query`` in the list."""
    found = Judgment.objects.filter(query__judgment_list=judgment_list, query__text=query)
    return dict(found.values_list("object_pk", "grade"))


def posted_grades(data: Mapping[str, str]) -> dict[str, int | None]:
    """The grading form's ``grade-<pk>`` fields: row pk -> grade 0-3, or None for "-"."""
    return {
        key.removeprefix("grade-"): int(value) if value else None
        for key, value in data.items()
        if key.startswith("grade-") and value in {"", "0", "1", "2", "3"}
    }


def save_grades(
    judgment_list: JudgmentList, query: str, grades: dict[str, int | None], visible: Any
) -> int:
    """Store ``grades`` (row pk -> grade; None removes the grade, and is ignored on a row not
    graded) of ``query`` in the list, for the rows of ``visible`` only; returns how many rows
    were graded or ungraded."""
    known = list_grades(judgment_list, query)
    grades = {pk: grade for pk, grade in grades.items() if grade is not None or pk in known}
    pks = list(grades)
    try:
        allowed = {str(pk) for pk in visible.filter(pk__in=pks).values_list("pk", flat=True)}
    except (ValueError, ValidationError):
        raise PermissionDenied("A graded row is not one of the rows shown.") from None
    if set(pks) - allowed:
        raise PermissionDenied("A graded row is not one of the rows shown.")
    changed = 0
    with transaction.atomic():
        judged, _ = JudgedQuery.objects.get_or_create(judgment_list=judgment_list, text=query)
        for pk, grade in grades.items():
            if grade is None:
                changed += Judgment.objects.filter(query=judged, object_pk=pk).delete()[0]
            else:
                Judgment.objects.update_or_create(
                    query=judged, object_pk=pk, defaults={"grade": grade}
                )
                changed += 1
        judgment_list.save(update_fields=["updated_at"])  # when its grades last changed
    return changed


def graded_field(
    judgment_list: JudgmentList | None, target: str | None, refs: Sequence[FieldRef]
) -> tuple[FieldRef | None, str | None]:
    """(The field graded, why there is none): the list's field; for a new list the field named
    ``target`` (``ref_key``), or the only one of ``refs`` (those the user may grade)."""
    if judgment_list is not None:
        try:
            return ref_of_list(judgment_list), None
        except LookupError as exc:
            return None, str(exc)
    # Among every field: one the user may not view is a 403 on the page, not a blank page.
    ref = next((r for r in field_refs() if ref_key(r) == target), None)
    return ref or (refs[0] if len(refs) == 1 else None), None
