"""``EmbeddingFormField``: a vector in a form (the admin's, ``full_clean``) as ``[0.1,0.2,...]``.

numpy arrays as field values break admin forms and ``full_clean`` (pgvector-python #21, #99):
this form field shows any vector as text and parses it back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from django import forms
from pgvector import Vector


class EmbeddingFormField(forms.CharField):
    """Shows a vector as ``[0.1,0.2,...]`` and parses it back (numpy arrays included)."""

    def prepare_value(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        # float32 values written in their shortest form: 0.1, not 0.10000000149011612.
        values = np.asarray(vector_list(value), dtype=np.float32)
        return "[" + ",".join(str(v) for v in values) + "]"

    def to_python(self, value: Any) -> list[float] | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, str):
            try:
                return Vector._from_db(value.strip())
            except ValueError as exc:
                raise forms.ValidationError(
                    "Enter a vector as comma-separated numbers in brackets, e.g. [0.1,0.2].",
                    code="invalid",
                ) from exc
        return vector_list(value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            new = self.to_python(data)
            old = self.to_python(initial)
        except forms.ValidationError:
            return True
        if new is None or old is None:
            return (new is None) != (old is None)
        return not np.array_equal(
            np.asarray(new, dtype=np.float32), np.asarray(old, dtype=np.float32)
        )


def vector_list(value: Any) -> list[float]:
    """A vector (pgvector ``Vector``, numpy array or sequence) as a list of floats."""
    if isinstance(value, Vector):
        return value.to_list()
    if isinstance(value, np.ndarray):
        return [float(v) for v in value.tolist()]
    return [float(v) for v in value]
