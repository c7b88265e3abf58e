"""OpenAPI 3 through drf-spectacular, when it is installed (``pip install drf-spectacular``).

Without it, ``extend_schema`` and friends are no-ops and ``schema/`` answers 501 with an install
hint, so the rest of the API works unchanged. The schema covers the sbert endpoints only, under
whatever prefix the project mounted them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from .registry import registry
from .settings import api_settings
from .throttling import SchemaRateThrottle

HAS_SPECTACULAR = importlib.util.find_spec("drf_spectacular") is not None

INSTALL_HINT = (
    "The OpenAPI schema needs drf-spectacular: pip install drf-spectacular "
    "(or pip install django-sbert[api])."
)

if HAS_SPECTACULAR:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.types import OpenApiTypes
    from drf_spectacular.utils import (
        OpenApiParameter,
        OpenApiResponse,
        extend_schema,
        extend_schema_field,
        inline_serializer,
    )
    from drf_spectacular.views import SpectacularAPIView

    class SbertAutoSchema(AutoSchema):
        """drf-spectacular's AutoSchema, taking the operation id from the view."""

        def get_operation_id(self) -> str:
            return getattr(self.view, "schema_operation_id", None) or super().get_operation_id()

    SBERT_VIEW_MODULES = (
        "django_sbert.api.views",
        "django_sbert.api.finetuning",
        "django_sbert.api.evaluations",
    )

    class SbertSchemaGenerator(SchemaGenerator):
        """The endpoints of django_sbert.api.views only, wherever the project mounted them."""

        def _initialise_endpoints(self) -> None:
            super()._initialise_endpoints()
            self.endpoints = [
                endpoint
                for endpoint in self.endpoints
                if getattr(endpoint[3], "cls", None) is not None
                and endpoint[3].cls.__module__ in SBERT_VIEW_MODULES
            ]

        def get_schema(self, request: Any = None, public: bool = False) -> dict[str, Any]:
            """The document, with the ``model`` parameters listing the registered models that
            this client may search (``registry.visible_labels``)."""
            result = super().get_schema(request=request, public=public)
            # EmbedRequestSerializer rejects unknown keys: say so.
            components = result.get("components", {}).get("schemas", {})
            if "EmbedRequest" in components:
                components["EmbedRequest"]["additionalProperties"] = False
            labels = registry.visible_labels(request)
            for operations in result.get("paths", {}).values():
                for operation in operations.values():
                    for parameter in operation.get("parameters", []):
                        if parameter.get("name") == "model" and labels:
                            parameter["schema"] = {"type": "string", "enum": labels}
            return result

        def coerce_path(self, path: str, method: str, view: Any) -> str:
            # Keep {pk}: SCHEMA_COERCE_PATH_PK would rename it {id}, which is wrong for models
            # whose primary key is not called id.
            return path

    class SchemaView(SpectacularAPIView):
        """GET schema/: the OpenAPI 3 document of the sbert endpoints (YAML or ?format=json).

        Throttled by the ``schema`` rate; who may read it is
        SBERT["API"]["PERMISSION_CLASSES"]["schema"] (None: drf-spectacular's SERVE_PERMISSIONS).
        """

        generator_class = SbertSchemaGenerator
        throttle_classes = [SchemaRateThrottle]

        def get_permissions(self) -> list[Any]:
            classes = api_settings.PERMISSION_CLASSES["schema"]
            if classes is None:
                return super().get_permissions()
            return [permission() for permission in classes]

else:  # pragma: no cover - exercised only without drf-spectacular
    SbertAutoSchema = None  # type: ignore[assignment,misc]
    OpenApiTypes = None  # type: ignore[assignment]

    def extend_schema(*args: Any, **kwargs: Any) -> Any:
        return lambda target: target

    extend_schema_field = extend_schema

    def _unavailable(*args: Any, **kwargs: Any) -> None:
        return None

    OpenApiParameter = OpenApiResponse = inline_serializer = _unavailable  # type: ignore[assignment]

    class SchemaView(APIView):  # type: ignore[no-redef]
        """GET schema/ without drf-spectacular: 501 with the install hint."""

        throttle_classes = [SchemaRateThrottle]

        def get_permissions(self) -> list[Any]:
            classes = api_settings.PERMISSION_CLASSES["schema"]
            return [permission() for permission in classes or []]

        def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Response:
            return Response({"detail": INSTALL_HINT}, status=status.HTTP_501_NOT_IMPLEMENTED)


def schema_class() -> Any:
    """A fresh drf-spectacular AutoSchema for views, whatever DEFAULT_SCHEMA_CLASS says."""
    return SbertAutoSchema() if SbertAutoSchema is not None else None


ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid parameters or body: a JSON object mapping each bad field to messages.",
    401: "Not authenticated (with authentication classes that send WWW-Authenticate).",
    403: "Not allowed: not authenticated, or missing a permission.",
    404: "Unknown model, unknown primary key, a row the client may not see, or no page.",
    405: "Method not allowed.",
    409: "The object has no embedding yet.",
    413: "Request body too large.",
    415: "Unsupported media type: send application/json.",
    429: "Too many requests: see the Retry-After header.",
    503: "A part the request needs is unavailable (the broker, the serving model's files, or the "
    "search ran past its time limit): see Retry-After.",
}


def error_responses(*codes: int, descriptions: Mapping[int, str] | None = None) -> dict[int, Any]:
    """OpenAPI responses for the error statuses ``codes`` (empty without drf-spectacular).

    ``descriptions`` overrides the wording of some codes for one group of views.
    """
    if OpenApiTypes is None:  # pragma: no cover
        return {}
    wording = {**ERROR_DESCRIPTIONS, **(descriptions or {})}
    return {code: OpenApiResponse(OpenApiTypes.OBJECT, description=wording[code]) for code in codes}
