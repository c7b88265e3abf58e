"""An indexed object -> the text of its index row, from its Wagtail ``search_fields``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import Manager, Model
from django.utils.encoding import force_str
from modelsearch.index import AutocompleteField, RelatedFields, SearchField

# A SearchField with a boost above this (or the one named "title") weighs A in keyword search
# and comes first in the text the vector is made of; the others weigh B.
TITLE_BOOST = 1.0


def plain(value: Any) -> str:
    """A field's value as text (lists and dicts, as StreamField's searchable content, joined)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(t for t in (plain(item) for item in value) if t)
    if isinstance(value, dict):
        return "\n".join(t for t in (plain(item) for item in value.values()) if t)
    return force_str(value)


def _values(obj: Model, fields: Any) -> Iterator[tuple[Any, str]]:
    """(search field, its text) for every SearchField / AutocompleteField, related ones too."""
    for field in fields:
        if isinstance(field, (SearchField, AutocompleteField)):
            yield field, plain(field.get_value(obj))
        elif isinstance(field, RelatedFields):
            related = field.get_value(obj)
            if related is None:
                continue
            if isinstance(related, Manager):
                related_objs = list(related.all())
            else:
                related_objs = [related() if callable(related) else related]
            for sub_obj in related_objs:
                yield from _values(sub_obj, field.fields)


def entry_texts(obj: Model) -> dict[str, str]:
    """``{"title": ..., "body": ..., "autocomplete": ...}`` for ``obj``'s index row."""
    title: list[str] = []
    body: list[str] = []
    autocomplete: list[str] = []
    for field, text in _values(obj, obj.get_search_fields()):
        text = text.strip()
        if not text:
            continue
        if isinstance(field, AutocompleteField):
            autocomplete.append(text)
        elif field.field_name == "title" or (field.boost or 0) > TITLE_BOOST:
            title.append(text)
        else:
            body.append(text)
    return {
        "title": "\n".join(dict.fromkeys(title)),  # a field listed twice counts once
        "body": "\n".join(dict.fromkeys(body)),
        "autocomplete": "\n".join(dict.fromkeys(autocomplete)),
    }
