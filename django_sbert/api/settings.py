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
documented in docs/api.md.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import SbertSettings

API_DEFAULTS: dict[str, Any] = {
    # search/ and similar/
    "DEFAULT_K": 10,  # results when the request gives no k
    "MAX_K": 100,  # largest k a client may ask for; each request fetches at most this many rows
    "MAX_QUERY_LENGTH": 1000,  # characters of q (and of ?semantic= in SemanticSearchFilter)
    "PAGE_SIZE": 10,  # results per page of search/ and similar/
    "MAX_PAGE_SIZE": 100,  # largest ?page_size= a client may ask for
    "PAGINATION_CLASS": "django_sbert.api.pagination.SearchPagination",  # None: one page
    # None: the project's REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]; a model registered
    # with permission_classes=... uses its own.
    "SEARCH_PERMISSION_CLASSES": None,
    # embed/
    "EMBED_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EMBED_MAX_TEXTS": 64,  # texts per request
    "EMBED_MAX_TEXT_LENGTH": 5000,  # characters per text
    "MAX_BODY_BYTES": 2 * 1024 * 1024,  # request bodies over this get 413
    # schema/: None keeps drf-spectacular's SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"] (AllowAny
    # unless the project changed it). The document names every registered model.
    "SCHEMA_PERMISSION_CLASSES": None,
    # Requests per period for each client (user id, or IP address when anonymous); None
    # turns a scope off. DRF's rate syntax: "60/minute", "1000/hour", "10/second".
    "THROTTLE_RATES": {"search": "120/minute", "embed": "30/minute", "schema": "60/minute"},
    # How many proxies in front of the site append to X-Forwarded-For. None: trust no proxy,
    # count anonymous clients by REMOTE_ADDR; N: the Nth address from the right of the header.
    "NUM_PROXIES": None,
}

IMPORT_STRINGS = (
    "PAGINATION_CLASS",
    "SEARCH_PERMISSION_CLASSES",
    "EMBED_PERMISSION_CLASSES",
    "SCHEMA_PERMISSION_CLASSES",
)
MERGED_KEYS = ("THROTTLE_RATES",)


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
        unknown = set(value) - set(API_DEFAULTS) if isinstance(value, dict) else set()
        if unknown:
            raise ImproperlyConfigured(
                f"Unknown SBERT['API'] settings: {', '.join(sorted(unknown))}. "
                f"Valid keys: {', '.join(sorted(API_DEFAULTS))}."
            )
        return value

    def convert(self, attr: str, value: Any) -> Any:
        return _import(value, attr) if attr in IMPORT_STRINGS else value


api_settings = APISettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "SBERT":
        api_settings.reload()


setting_changed.connect(_reload, dispatch_uid="django_sbert.api.settings.reload")
