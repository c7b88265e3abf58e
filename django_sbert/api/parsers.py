"""A JSON parser that refuses bodies over ``api_settings.MAX_BODY_BYTES`` (2 MiB) with 413.

Django's DATA_UPLOAD_MAX_MEMORY_SIZE guards ``request.body`` and form data, but DRF's parsers
read the request stream directly, so a JSON body of any size would be read into memory.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.parsers import JSONParser

from .settings import api_settings


class RequestBodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "request_too_large"


class BoundedJSONParser(JSONParser):
    """JSONParser reading at most MAX_BODY_BYTES (+1 to tell "too large" from "exactly")."""

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = int(api_settings.MAX_BODY_BYTES)
        message = (
            f"Request body too large: the limit is {limit} bytes "
            "(api_settings.MAX_BODY_BYTES). Send fewer or shorter texts per request."
        )
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise RequestBodyTooLarge(message)  # refuse before reading anything
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise RequestBodyTooLarge(message)
        return super().parse(io.BytesIO(data), media_type, parser_context)
