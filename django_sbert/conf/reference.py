"""The reference tables of docs/settings.md, rendered from the declaration.

``python -m django_sbert.conf`` prints them; ``--write docs/settings.md`` puts each between its
markers (``<!-- settings:search -->`` ... ``<!-- /settings:search -->``).
"""

from __future__ import annotations

from .declaration import ENCODER, TOP, groups
from .renamed import RENAMED, RETIRED, Path
from .schema import Group, Setting, markdown_table

BEGIN, END = "<!-- settings:{} -->", "<!-- /settings:{} -->"


def reference_tables() -> dict[str, str]:
    """Markdown table per part of docs/settings.md: "top", each group by its anchor, "renamed"."""
    top: dict[str, Setting] = {}
    for name, item in TOP.items():
        if isinstance(item, Setting):
            top[name] = item
        elif isinstance(item, Group):
            top[name] = Setting(None, f"{item.doc} [Keys](#{item.anchor}).", shown_default="`{}`")
        else:
            doc = f"{item.doc} [Keys](#{item.group.anchor})."
            top[name] = Setting(None, doc, shown_default='`{"default": {}}`')
    tables = {"top": markdown_table(top), ENCODER.anchor: markdown_table(ENCODER.keys)}
    for _, group in groups():
        tables[group.anchor] = markdown_table(group.keys)
    rows = ["| earlier key | now |", "|---|---|"]
    rows += [f"| {_path(old)} | {_path(new)} |" for old, new in RENAMED.items()]
    rows += [f"| {_path(old)} | not a setting: {now} |" for old, now in RETIRED.items()]
    tables["renamed"] = "\n".join(rows)
    return tables


def _path(path: Path) -> str:
    """``SEARCH`` / ``RRF_K``: a path in the table (``name``: any encoder's)."""
    return " / ".join(f"`{'name' if part == '*' else part}`" for part in path)


def write_reference(text: str) -> str:
    """``text`` (docs/settings.md) with every marked table replaced by the rendered one."""
    return replace_tables(text, reference_tables(), (BEGIN, END), "docs/settings.md")


def replace_tables(text: str, tables: dict[str, str], markers: tuple[str, str], page: str) -> str:
    """``text`` with the table between each name's ``markers`` (``{}``: the name) replaced by
    ``tables[name]``; ``page`` names the file in the error for a missing marker."""
    for name, table in tables.items():
        begin, end = (marker.format(name) for marker in markers)
        head, found, rest = text.partition(begin)
        if not found:
            raise ValueError(f"{page} lacks the marker {begin}")
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text
