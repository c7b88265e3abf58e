"""The ``SBERT`` settings dict: declared once, read through one object.

``declaration`` declares every key with its default, the rule its value follows and one line
on what it does (in ``schema``'s vocabulary; ``options`` is that of a bounded option, which
the pair options and the training options share); ``renamed`` reads keys of the previous
release;
``reference`` renders docs/settings.md's tables (``__main__``: ``python -m django_sbert.conf``
prints them, ``--write docs/settings.md`` updates the page). The settings
object falls back to the declaration, and the start-up check (``django_sbert.E005``) validates
against it, naming the closest known key for a typo::

    from django_sbert.conf import sbert_settings
    sbert_settings.QUEUE                      # "sbert" unless settings.SBERT["QUEUE"] says so
    sbert_settings.SEARCH["FUSION"]["RRF_K"]  # groups: the project's dicts merged over defaults
    encoder_config("default")["MODEL"]        # one encoder's settings, inner defaults filled in

Attributes are read lazily on first access and cached; the cache is dropped when the ``SBERT``
setting changes (``override_settings`` in tests fires ``setting_changed``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .declaration import (
    API,
    API_DEFAULTS,
    BUDGET,
    DEFAULTS,
    ENCODER,
    ENCODER_DEFAULTS,
    SEARCH_DEFAULTS,
    SETTING_NAME,
    TOP,
    groups,
    leaf_count,
)
from .reference import BEGIN, END, reference_tables, write_reference
from .renamed import RENAMED, RETIRED, normalized
from .schema import (
    Declared,
    Group,
    PerName,
    group_problems,
    merged,
    unknown_key,
    unknown_key_hint,
    value_problems,
)

__all__ = [
    "API",
    "API_DEFAULTS",
    "BEGIN",
    "BUDGET",
    "DEFAULTS",
    "END",
    "ENCODER",
    "ENCODER_DEFAULTS",
    "RENAMED",
    "RETIRED",
    "SEARCH_DEFAULTS",
    "SETTING_NAME",
    "TOP",
    "SbertSettings",
    "deprecated_settings",
    "encoder_config",
    "encoder_conflict",
    "groups",
    "leaf_count",
    "normalized",
    "reference_tables",
    "sbert_settings",
    "settings_problems",
    "write_reference",
]


class SbertSettings:
    """Lazy view of ``settings.SBERT`` over its declaration; ``reload()`` drops cached values.

    Subclasses view a part of ``SBERT`` (``django_sbert.api.settings``) by overriding
    ``read_user_settings()`` and ``convert()``, with that part's declaration.
    """

    label = SETTING_NAME  # how messages name the settings this object reads

    def __init__(self, declaration: Mapping[str, Declared] | None = None) -> None:
        self.declaration = declaration or TOP
        self.defaults = (
            DEFAULTS
            if declaration is None
            else {
                name: item.defaults() if isinstance(item, Group) else item.default
                for name, item in self.declaration.items()
            }
        )
        self._cached: set[str] = set()
        self._user: dict[str, Any] | None = None

    def read_user_settings(self) -> Any:
        return getattr(settings, SETTING_NAME, None) or {}

    def convert(self, attr: str, value: Any) -> Any:
        """Turn a merged setting value into what callers use (import strings, ...)."""
        return value

    @property
    def user_settings(self) -> dict[str, Any]:
        if self._user is None:
            value = self.read_user_settings()
            if not isinstance(value, dict):
                raise ImproperlyConfigured(
                    f"settings.{self.label} must be a dict, got {type(value).__name__}."
                )
            value, notes = normalized(value) if self.declaration is TOP else (value, [])
            for note in notes:
                warnings.warn(note, DeprecationWarning, stacklevel=3)
            self._user = value
        return self._user

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr not in self.defaults:
            known = ", ".join(sorted(self.defaults))
            raise AttributeError(
                f"Invalid {self.label} setting: {attr!r}. Known settings: {known}."
            )
        declared = self.declaration[attr]
        value = self.user_settings.get(attr, self.defaults[attr])
        if isinstance(declared, PerName):
            value = {**self.defaults[attr], **(value or {})}
        else:
            value = merged(declared, value)
        value = self.convert(attr, value)
        self._cached.add(attr)
        setattr(self, attr, value)
        return value

    def reload(self) -> None:
        for attr in self._cached:
            delattr(self, attr)
        self._cached.clear()
        self._user = None
        _encoder_configs.clear()


sbert_settings = SbertSettings()


def settings_problems() -> list[tuple[str, str | None]]:
    """(message, hint) for every way ``settings.SBERT`` departs from the declaration:
    unknown keys (with the closest known one), values that break their rules. The start-up
    check (``django_sbert.E005``) reports them; earlier keys are read first (``W003``)."""
    user = sbert_settings.user_settings
    found: list[tuple[str, str | None]] = []
    for key, value in user.items():
        declared = TOP.get(key)
        path = f"SBERT[{key!r}]"
        if declared is None:
            found.append(unknown_key("SBERT", key, TOP))
        elif isinstance(declared, Group):
            found.extend(group_problems(path, value, declared))
        elif isinstance(declared, PerName):
            if not isinstance(value, dict):
                found.append((f"{path} must be a dict of name -> settings dict.", None))
                continue
            for name, inner in value.items():
                inner_path = f"{path}[{name!r}]"
                inner_problems = group_problems(inner_path, inner or {}, declared.group)
                found.extend(inner_problems)
                if not inner_problems and isinstance(inner or {}, dict):
                    conflict = encoder_conflict(inner_path, {**ENCODER_DEFAULTS, **(inner or {})})
                    found.extend([(conflict, None)] if conflict else [])
        else:
            found.extend(value_problems(path, value, declared))
    return found


def deprecated_settings() -> list[str]:
    """A note per earlier key the project still uses (check ``django_sbert.W003``)."""
    user = getattr(settings, SETTING_NAME, None) or {}
    return normalized(user)[1] if isinstance(user, dict) else []


# encoder_config's answers, checked once per settings (a search reads them several times).
_encoder_configs: dict[str, dict[str, Any]] = {}


def encoder_config(name: str = "default") -> dict[str, Any]:
    """Settings of the encoder called ``name``, with missing keys taken from ENCODER_DEFAULTS."""
    cached = _encoder_configs.get(name)
    if cached is None:
        cached = _encoder_configs[name] = _checked_encoder_config(name)
    return dict(cached)  # the caller's own copy


def _checked_encoder_config(name: str) -> dict[str, Any]:
    encoders = sbert_settings.ENCODERS or {}
    if name not in encoders:
        known = ", ".join(repr(n) for n in sorted(encoders)) or "none"
        raise ImproperlyConfigured(
            f"Unknown encoder {name!r}: settings.SBERT['ENCODERS'] defines {known}. Add "
            f"SBERT = {{'ENCODERS': {{{name!r}: {{'MODEL': 'all-MiniLM-L6-v2'}}}}}} to your "
            "settings, or pass one of the defined names as EmbeddingField(encoder=...)."
        )
    config = encoders[name] or {}
    path = f"settings.SBERT['ENCODERS'][{name!r}]"
    unknown = sorted(set(config) - set(ENCODER.keys))
    if unknown:
        raise ImproperlyConfigured(
            f"{path} has unknown keys {unknown}; {unknown_key_hint(unknown[0], ENCODER.keys)}"
        )
    problems = group_problems(path, config, ENCODER)
    if problems:
        raise ImproperlyConfigured(problems[0][0])
    merged = {**ENCODER_DEFAULTS, **config}
    conflict = encoder_conflict(path, merged)
    if conflict:
        raise ImproperlyConfigured(conflict)
    return merged


def encoder_conflict(path: str, merged: dict[str, Any]) -> str | None:
    """The rules across an encoder's keys: int8 quantization excludes the other paths, and
    ONNX Runtime queries run float32 on the CPU."""
    if merged["QUANTIZE"] and (merged["COMPILE"] is True or merged["PRECISION"] == "bfloat16"):
        return (
            f"{path} sets QUANTIZE with COMPILE=True or PRECISION='bfloat16'; choose one "
            "(COMPILE keeps float32 vectors, QUANTIZE trades a little accuracy for speed), or "
            "leave COMPILE and PRECISION at 'auto'."
        )
    runtime = merged["QUERY_RUNTIME"]
    if runtime in ("onnxruntime", "onnxruntime-int8"):
        device = str(merged["DEVICE"] or "cpu").split(":")[0]
        if merged["QUANTIZE"] or device != "cpu":
            return (
                f"{path} sets QUERY_RUNTIME={runtime!r} with "
                f"{'QUANTIZE' if merged['QUANTIZE'] else f'DEVICE={device!r}'}: ONNX Runtime "
                "encodes queries from the float model on the CPU. Leave QUERY_RUNTIME at "
                "'auto'."
            )
    return None


def reload_sbert_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        sbert_settings.reload()


setting_changed.connect(reload_sbert_settings, dispatch_uid="django_sbert.conf.reload")
