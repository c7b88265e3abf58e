"""``click``: a click or conversion on a logged search result, for server-rendered pages.

``django_sbert/clicks.js`` posts here with ``navigator.sendBeacon`` (form-encoded ``token``
and ``kind``) when a link marked by ``{% sbert_click_attrs hit %}`` is followed; a JSON body
works too. The REST API's ``events/`` does the same for API clients; both call
``feedback.record_event``, so they share its checks and its throttle::

    path("sbert/", include("django_sbert.urls"))   # POST sbert/click/

Answers 202 ``{"status": "accepted"}``; 400 for a bad token, kind or dwell time (a message
saying which; the dwell time, ASCII digits only, is read after the token is checked), 413 for
a body over 4 KB (never read past that), 404 when the site does not log searches, 429
past the client's rate.
"""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.exceptions import TooManyFieldsSent
from django.http import HttpRequest, JsonResponse, QueryDict
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ..exceptions import EventRefused
from ..feedback import record_event

MAX_BODY = 4096  # a token, a kind and a number: anything longer is not an event


def _body(request: HttpRequest) -> bytes:
    """The body, at most MAX_BODY bytes of it: 413 for a body whose length says it is larger
    (before any of it is read) or that turns out larger (a chunked body under ASGI has no
    length). Not ``request.body``, which would read up to DATA_UPLOAD_MAX_MEMORY_SIZE and
    answer a larger body with Django's HTML 400 and a logged security error, for anyone to
    repeat."""
    too_large = EventRefused(f"The body is over {MAX_BODY} bytes; send a token and a kind.", 413)
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY:
        raise too_large
    body = request.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise too_large
    return body


def _fields(request: HttpRequest) -> dict[str, Any]:
    body = _body(request)
    if request.content_type == "application/json":
        try:
            data = json.loads(body or b"{}")
        except (ValueError, RecursionError):  # RecursionError: "[[[[..."
            raise EventRefused("The body is not valid JSON.") from None
        if not isinstance(data, dict):
            raise EventRefused('Send a JSON object: {"token": ..., "kind": "click"}.')
        return data
    try:
        if request.content_type == "multipart/form-data":
            handlers = request.upload_handlers
            form, _ = MultiPartParser(request.META, io.BytesIO(body), handlers).parse()
        else:  # clicks.js: URLSearchParams, urlencoded
            form = QueryDict(body, encoding=request.encoding)
    except (TooManyFieldsSent, MultiPartParserError, LookupError, UnicodeError):
        raise EventRefused("Send a form of token, kind and dwell_ms.") from None
    return form.dict()


@csrf_exempt  # the signed token proves the result was shown; a beacon sends no CSRF header
@require_POST
def click(request: HttpRequest) -> JsonResponse:
    """POST token (a result's ``data-sbert-click``), kind (default "click"), dwell_ms."""
    try:
        data = _fields(request)
        token = data.get("token")
        if not isinstance(token, str) or not token:
            raise EventRefused("Pass the result's click token as token.")
        kind = data.get("kind") or "click"
        if not isinstance(kind, str):
            raise EventRefused("kind must be a string.")
        # dwell_ms as sent: record_event reads it once the token is known good.
        record_event(request, token, kind, data.get("dwell_ms"))
    except EventRefused as exc:
        return JsonResponse({"detail": str(exc)}, status=exc.status)
    return JsonResponse({"status": "accepted"}, status=202)
