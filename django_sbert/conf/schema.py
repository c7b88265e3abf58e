"""The vocabulary ``conf.declaration`` declares the ``SBERT`` settings in: a setting, a group,
a rule.

One declaration serves three readers: the settings object (defaults), the start-up check
(``django_sbert.E005``: unknown keys with the closest known one, values against their rules)
and the reference in docs/settings.md (tables rendered by ``python -m django_sbert.conf``).
A group may hold groups (``SEARCH["FUSION"]``); a project's dict is merged over the defaults
at every level. No Django import: this module is data and plain functions.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    """What a valid value is: ``test(value)`` says whether it is, ``expect`` says it in words."""

    test: Callable[[Any], bool]
    expect: str


@dataclass(frozen=True)
class Setting:
    """One key: its default, what it does in one line (with a link where more is said), and
    the rule its value must follow."""

    default: Any
    doc: str
    rule: Rule | None = None
    shown_default: str | None = None  # how the docs show a default that is not a literal
    merged: bool = False  # a dict value merged over the default dict (naming one scope keeps
    # the others)


@dataclass(frozen=True)
class Group:
    """A dict-valued key whose entries are declared too; a project's dict is merged over the
    defaults key by key, so ``SEARCH={"K": 5}`` keeps every other search default."""

    keys: Mapping[str, Setting | Group]
    doc: str
    anchor: str = ""  # heading in docs/settings.md where the group's table lives

    def defaults(self) -> dict[str, Any]:
        return {name: default_of(item) for name, item in self.keys.items()}

    def leaves(self) -> int:
        """How many keys a project can set in it, its groups' keys counted one by one."""
        return sum(item.leaves() if isinstance(item, Group) else 1 for item in self.keys.values())


@dataclass(frozen=True)
class PerName:
    """A dict of name -> group (``ENCODERS``): every entry is checked against ``group``."""

    group: Group
    default: dict[str, dict[str, Any]] = field(default_factory=dict)
    doc: str = ""


Declared = Setting | Group | PerName


def default_of(item: Declared) -> Any:
    """The default value of a declared key: a group's is the dict of its keys' defaults."""
    return item.defaults() if isinstance(item, Group) else item.default


def merged(item: Declared, value: Any) -> Any:
    """A project's ``value`` for ``item`` over its default: a group's dict key by key (and its
    groups' likewise), a merged setting's dict scope by scope; any other value as given."""
    if isinstance(item, Group):
        given = value if isinstance(value, dict) else {}
        return {
            name: merged(inner, given[name]) if name in given else default_of(inner)
            for name, inner in item.keys.items()
        } | {name: given[name] for name in given if name not in item.keys}
    if isinstance(item, Setting) and item.merged and isinstance(value, dict):
        return {**item.default, **value}
    return value


# Rules. Each returns a Rule whose ``expect`` completes "must be ...".


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def optional(rule: Rule) -> Rule:
    return Rule(lambda v: v is None or rule.test(v), f"{rule.expect} or None")


def one_of(*choices: Any) -> Rule:
    shown = [repr(c) for c in choices]
    listed = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
    return Rule(
        lambda v: v in choices and type(v) in {type(c) for c in choices}, f"one of {listed}"
    )


def integer(minimum: int | None = None, maximum: int | None = None) -> Rule:
    if maximum is not None:
        expect = f"an integer from {minimum} to {maximum}"
    elif minimum == 1:
        expect = "a positive integer"
    else:
        expect = f"an integer >= {minimum}" if minimum is not None else "an integer"

    def test(v: Any) -> bool:
        return (
            _is_int(v) and (minimum is None or v >= minimum) and (maximum is None or v <= maximum)
        )

    return Rule(test, expect)


def number(
    minimum: float | None = None, maximum: float | None = None, *, above: bool = False
) -> Rule:
    """A number >= ``minimum`` (> with ``above=True``) and <= ``maximum``."""
    low = "" if minimum is None else f"{'>' if above else '>='} {minimum}"
    high = "" if maximum is None else f"<= {maximum}"
    expect = "a number" + (f" {low}" if low else "") + (f" and {high}" if low and high else "")
    expect += "" if low else (f" {high}" if high else "")

    def test(v: Any) -> bool:
        if not _is_number(v):
            return False
        if minimum is not None and (v <= minimum if above else v < minimum):
            return False
        return maximum is None or v <= maximum

    return Rule(test, expect)


BOOLEAN = Rule(lambda v: isinstance(v, bool), "True or False")
TEXT = Rule(lambda v: isinstance(v, str), "a string")
PATH = Rule(lambda v: isinstance(v, str) or hasattr(v, "__fspath__"), "a path")
# QUERY_SERVER SOCKET: a path (web processes load no model), or [path, "in-process"] (they
# encode texts themselves while the server is away).
SOCKET = Rule(
    lambda v: (
        PATH.test(v)
        or (
            isinstance(v, list | tuple) and len(v) == 2 and PATH.test(v[0]) and v[1] == "in-process"
        )
    ),
    'a path, or [path, "in-process"]',
)
SIZE = Rule(
    lambda v: (_is_int(v) and v > 0) or (isinstance(v, str) and v.strip() != ""),
    'a number of bytes or a PostgreSQL size such as "1GB"',
)
POSITIVE_INTEGERS = Rule(
    lambda v: isinstance(v, list | tuple) and all(_is_int(d) and d > 0 for d in v),
    "a list of positive integers",
)
IMPORT_STRINGS = Rule(
    lambda v: isinstance(v, list | tuple) and all(isinstance(s, str) or callable(s) for s in v),
    "a list of dotted paths to classes",
)

_LETTERS = ("A", "B", "C", "D")
LETTER_NUMBERS = Rule(
    lambda v: (
        isinstance(v, dict)
        and set(v) <= set(_LETTERS)
        and all(
            isinstance(n, int | float) and not isinstance(n, bool) and n >= 0 for n in v.values()
        )
    ),
    "a dict of weight letter (A, B, C, D) -> number >= 0",
)
LETTER_NUMBERS_OR_FRACTION = Rule(
    lambda v: (
        (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1)
        or (
            isinstance(v, dict)
            and set(v) <= set(_LETTERS)
            and all(
                isinstance(n, int | float) and not isinstance(n, bool) and 0 <= n <= 1
                for n in v.values()
            )
        )
    ),
    "a number in [0, 1] or a dict of weight letter (A, B, C, D) -> number in [0, 1]",
)


PERMISSION_SCOPES = Rule(
    lambda v: (
        isinstance(v, dict)
        and set(v) <= {"search", "embed", "schema"}
        and all(c is None or IMPORT_STRINGS.test(c) for c in v.values())
    ),
    "a dict of endpoint (search, embed, schema) -> list of dotted paths to classes, or None",
)


STRINGS = Rule(
    lambda v: isinstance(v, list | tuple) and all(isinstance(s, str) for s in v),
    "a list of strings",
)


def _is_rate(value: Any) -> bool:
    count, _, period = str(value).partition("/")
    return count.isdigit() and period[:1] in ("s", "m", "h", "d")


RATE_SCOPES = Rule(
    lambda v: (
        isinstance(v, dict)
        and set(v) <= {"search", "suggest", "embed", "schema", "clicks", "health", "logging"}
        and all(r is None or _is_rate(r) for r in v.values())
    ),
    "a dict of scope (search, suggest, embed, schema, clicks, health, logging) -> rate such "
    'as "60/minute" or None',
)


# Validation: messages naming the key as a project writes it, e.g. SBERT['SEARCH']['K'].


def closest(name: str, known: Iterator[str] | Mapping[str, Any]) -> str | None:
    """The known key a misspelt ``name`` most likely meant (``EF_SERACH`` -> ``EF_SEARCH``)."""
    found = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_key_hint(name: str, known: Mapping[str, Any]) -> str:
    guess = closest(name, known)
    valid = ", ".join(sorted(known))
    return (f"Did you mean {guess!r}? " if guess else "") + f"Valid keys: {valid}."


def unknown_key(path: str, name: str, known: Mapping[str, Any]) -> tuple[str, str]:
    """(message, hint) for a key the declaration lacks; the message names the closest one."""
    guess = closest(name, known)
    message = f"Unknown key {path}[{name!r}]" + (f"; did you mean {guess!r}?" if guess else ".")
    return message, f"Valid keys: {', '.join(sorted(known))} (docs/settings.md)."


def value_problems(path: str, value: Any, declared: Setting) -> list[tuple[str, str | None]]:
    """(message, hint) when ``value`` breaks the setting's rule; [] when it follows it."""
    rule = declared.rule
    if rule is None or rule.test(value):
        return []
    message = f"{path} must be {rule.expect}, got {value!r}."
    hint = f"The default is {declared.default!r} (docs/settings.md)."
    return [(message, hint)]


def group_problems(path: str, value: Any, group: Group) -> list[tuple[str, str | None]]:
    """Problems of a project's dict for ``group``: not a dict, unknown keys, bad values."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [(f"{path} must be a dict, got {type(value).__name__}.", None)]
    found: list[tuple[str, str | None]] = []
    found.extend(unknown_key(path, key, group.keys) for key in value if key not in group.keys)
    for key, declared in group.keys.items():
        if key not in value:
            continue
        if isinstance(declared, Group):
            found.extend(group_problems(f"{path}[{key!r}]", value[key], declared))
        else:
            found.extend(value_problems(f"{path}[{key!r}]", value[key], declared))
    return found


# The reference tables of docs/settings.md.


def _shown(setting: Setting) -> str:
    if setting.shown_default is not None:
        return setting.shown_default
    return f"`{_python(setting.default)}`"


def _python(value: Any) -> str:
    """A default as a settings module writes it (strings in double quotes)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_python(k)}: {_python(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    return repr(value)


def markdown_table(keys: Mapping[str, Setting | Group]) -> str:
    """One table: key, default, what it does (a group: a link to its own table)."""
    lines = ["| key | default | what it does |", "|---|---|---|"]
    for name, item in keys.items():
        if isinstance(item, Group):
            lines.append(f"| `{name}` | `{{}}` | {item.doc} [Keys](#{item.anchor}). |")
        else:
            lines.append(f"| `{name}` | {_shown(item)} | {item.doc} |")
    return "\n".join(lines)
