"""Settings of the REST API: ``SBERT["API"]``, read through one object with documented defaults.

::

    SBERT = {
        "API": {
            "MAX_K": 50,
            "THROTTLE_RATES": {"search": "600/minute"},  # merged: the other scopes keep theirs
            "EMBED_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
        }
    }

Like DRF's ``api_settings``: values are read lazily, import strings are imported on access, and
everything is dropped when ``SBERT`` changes (``override_settings`` in tests). Every key is
declared, with its default, in ``django_sbert.conf.API`` and listed in docs/settings.md.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import API_DEFAULTS, SbertSettings
from ..settings_schema import unknown_key_hint

IMPORT_STRINGS = (
    "PAGINATION_CLASS",
    "SEARCH_PERMISSION_CLASSES",
    "EMBED_PERMISSION_CLASSES",
    "SCHEMA_PERMISSION_CLASSES",
)
MERGED_KEYS = ("THROTTLE_RATES",)  # a project naming one scope keeps the others' rates


def _import(value: Any, key: str) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return import_string(value)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"Could not import {value!r} for SBERT['API'][{key!r}]: {exc}. Use a dotted "
                "path such as 'rest_framework.permissions.IsAuthenticated'."
            ) from exc
    if isinstance(value, list | tuple):
        return [_import(item, key) for item in value]
    return value


class APISettings(SbertSettings):
    """Lazy view of ``settings.SBERT["API"]`` over ``API_DEFAULTS``."""

    label = "SBERT['API']"
    merged_keys = MERGED_KEYS

    def __init__(self) -> None:
        super().__init__(API_DEFAULTS)

    def read_user_settings(self) -> Any:
        value = (getattr(settings, "SBERT", None) or {}).get("API") or {}
        unknown = sorted(set(value) - set(API_DEFAULTS)) if isinstance(value, dict) else []
        if unknown:
            raise ImproperlyConfigured(
                f"Unknown SBERT['API'] settings: {', '.join(unknown)}. "
                + unknown_key_hint(unknown[0], API_DEFAULTS)
            )
        return value

    def convert(self, attr: str, value: Any) -> Any:
        return _import(value, attr) if attr in IMPORT_STRINGS else value


api_settings = APISettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "SBERT":
        api_settings.reload()


setting_changed.connect(_reload, dispatch_uid="django_sbert.api.settings.reload")
