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


def _values(obj: Model, fields: Any, path: str = "") -> Iterator[tuple[str, Any, str]]:
    """(path, search field, its text) for every SearchField / AutocompleteField, related ones
    too (``path``: the relations followed, so that the same text under two relations, as a
    novel's protagonist among its characters, counts twice)."""
    for field in fields:
        if isinstance(field, (SearchField, AutocompleteField)):
            yield path, field, plain(field.get_value(obj))
        elif isinstance(field, RelatedFields):
            related = field.get_value(obj)
            if related is None:
                continue
            if isinstance(related, Manager):
                related_objs = list(related.all())
            else:
                related_objs = [related() if callable(related) else related]
            for sub_obj in related_objs:
                yield from _values(sub_obj, field.fields, f"{path}{field.field_name}.")


def entry_texts(obj: Model) -> dict[str, str]:
    """``{"title": ..., "body": ..., "autocomplete": ...}`` for ``obj``'s index row."""
    # (where it came from, text) -> text: a field listed twice counts once.
    title: dict[tuple[str, str], str] = {}
    body: dict[tuple[str, str], str] = {}
    autocomplete: dict[tuple[str, str], str] = {}
    for path, field, text in _values(obj, obj.get_search_fields()):
        text = text.strip()
        if not text:
            continue
        key = (path + field.field_name, text)
        if isinstance(field, AutocompleteField):
            autocomplete[key] = text
        elif field.field_name == "title" or (field.boost or 0) > TITLE_BOOST:
            title[key] = text
        else:
            body[key] = text
    return {
        "title": "\n".join(title.values()),
        "body": "\n".join(body.values()),
        "autocomplete": "\n".join(dict.fromkeys(autocomplete.values())),
    }
