"""Settings of the REST API: ``SBERT["API"]``, read through one object with documented defaults.

Like DRF's ``api_settings``: values are read lazily, import strings are imported on access, and
everything is dropped when ``SBERT`` changes (``override_settings`` in tests). Every key is
declared, with its default, in ``django_sbert.conf.API`` and listed in docs/settings.md. The
API's fixed limits are attributes of the same object (``api_settings.EMBED_MAX_TEXTS``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import API, SbertSettings, sbert_settings
from ..conf.schema import unknown_key_hint


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
    if isinstance(value, dict):
        return {name: _import(item, key) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_import(item, key) for item in value]
    return value


class APISettings(SbertSettings):
    """Lazy view of ``settings.SBERT["API"]`` over its declaration, and the API's limits."""

    label = "SBERT['API']"
    SUGGEST_MAX_K = 20  # the largest k of suggest/
    SUGGEST_MAX_QUERY_LENGTH = 200  # characters of q in suggest/: what a search box holds
    EMBED_MAX_TEXTS = 64  # texts per embed/ request
    EMBED_MAX_TEXT_LENGTH = 5000  # characters per embed/ text
    MAX_BODY_BYTES = 2 * 1024 * 1024  # request bodies over this get 413
    MAX_PAGE_SIZE = 100  # the largest ?page_size= a client may ask for

    def __init__(self) -> None:
        super().__init__(API.keys)

    def read_user_settings(self) -> Any:
        # Read with the earlier keys moved (conf.renamed): API["DEFAULT_K"] is SEARCH["K"] now.
        value = sbert_settings.user_settings.get("API") or {}
        unknown = sorted(set(value) - set(API.keys)) if isinstance(value, dict) else []
        if unknown:
            raise ImproperlyConfigured(
                f"Unknown SBERT['API'] settings: {', '.join(unknown)}. "
                + unknown_key_hint(unknown[0], API.keys)
            )
        return value

    def convert(self, attr: str, value: Any) -> Any:
        return _import(value, attr) if attr == "PERMISSION_CLASSES" else value


api_settings = APISettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "SBERT":
        api_settings.reload()


setting_changed.connect(_reload, dispatch_uid="django_sbert.api.settings.reload")
