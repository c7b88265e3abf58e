"""JSON and form parsers that refuse bodies over ``api_settings.MAX_BODY_BYTES`` (2 MiB) with 413.

The bound holds while reading: a body declared larger is refused before any of it is read, and
one without a length is read to one byte past the limit at most. That is why these are not
subclasses of DRF's ``JSONParser`` and ``FormParser``: recent DRF releases read the whole
``request.body`` for those before their ``parse()`` runs, so a body of up to Django's
DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) would be read first, and a larger one would end as
Django's HTML "Bad Request" with a ``django.security`` error logged, which anyone who can reach
the click endpoint could repeat. As with DRF's parsers before those releases, the body is read
from the stream: ``request.body`` is not available after ``request.data``.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent
from django.http import QueryDict
from rest_framework import renderers, status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.settings import api_settings as drf_settings
from rest_framework.utils import json

from .settings import api_settings


class RequestBodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "request_too_large"


def declared_length(meta: Mapping[str, Any]) -> int:
    """``CONTENT_LENGTH`` as Django reads it (``int()``; absent or unreadable: 0)."""
    try:
        return max(int(meta.get("CONTENT_LENGTH") or 0), 0)
    except ValueError:
        return 0


def body_limit() -> int:
    """MAX_BODY_BYTES, or Django's DATA_UPLOAD_MAX_MEMORY_SIZE where a site set it lower."""
    limit = int(api_settings.MAX_BODY_BYTES)
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return limit if django_limit is None else min(limit, int(django_limit))


def read_bounded(stream: IO[bytes] | None, parser_context: Mapping[str, Any] | None) -> bytes:
    """The body, at most ``body_limit()`` bytes of it (+1 read to tell "too large" from
    "exactly"); 413 when it is larger or declares itself larger."""
    limit = body_limit()
    message = (
        f"Request body too large: the limit is {limit} bytes "
        "(api_settings.MAX_BODY_BYTES). Send fewer or shorter texts per request."
    )
    request = (parser_context or {}).get("request")
    if request is not None and declared_length(request.META) > limit:
        raise RequestBodyTooLarge(message)  # refuse before reading anything
    data = stream.read(limit + 1) if stream is not None else b""
    if len(data) > limit:
        raise RequestBodyTooLarge(message)
    return data


def text_encoding(parser_context: Mapping[str, Any] | None) -> str:
    """The body's charset (the Content-Type's, else DEFAULT_CHARSET); 400 for one that is no
    text encoding (``bz2_codec`` would decompress a small body into a large one)."""
    encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
    try:
        "".encode(encoding)  # bytes-to-bytes codecs refuse str
    except (LookupError, UnicodeError) as exc:
        raise ParseError(f'Unsupported charset "{encoding}" in the Content-Type header.') from exc
    return encoding


class BoundedJSONParser(BaseParser):
    """DRF's JSONParser (``STRICT_JSON``: no NaN) on a body read by ``read_bounded``."""

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer  # the browsable API's raw-data form
    strict = drf_settings.STRICT_JSON

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        data = read_bounded(stream, parser_context)
        encoding = text_encoding(parser_context)
        try:
            text = codecs.decode(data, encoding)
            parse_constant = json.strict_constant if self.strict else None
            return json.loads(text, parse_constant=parse_constant)
        except ValueError as exc:  # UnicodeDecodeError is one
            raise ParseError(f"JSON parse error - {exc}") from exc
        except RecursionError as exc:  # "[[[[...": a 400, not a 500 with a traceback logged
            raise ParseError("JSON parse error - nested too deeply.") from exc


class BoundedFormParser(BaseParser):
    """DRF's FormParser (``application/x-www-form-urlencoded``, as ``navigator.sendBeacon``
    sends a form) on a body read by ``read_bounded``."""

    media_type = "application/x-www-form-urlencoded"

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> QueryDict:
        data = read_bounded(stream, parser_context)
        try:
            return QueryDict(data, encoding=text_encoding(parser_context))
        except TooManyFieldsSent as exc:  # Django's bound on fields: a 400 of the API's own
            raise ParseError(str(exc)) from exc
