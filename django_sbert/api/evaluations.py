"""evaluations/: search quality measured on judgment lists, for staff with the admin's permissions.

Who may do what is what the admin's "Evaluate now" asks (``EvaluationPermissions``).

``GET evaluations/?list=<name>`` lists the stored evaluations (of one list, or of all), newest
first, paginated. ``POST evaluations/ {"list": name, "version": "serving", "modes": [...],
"store": true}`` measures the list now (``evaluation.run.evaluate``, the same as ``manage.py
sbert_evaluate``) and answers with the evaluations, one per mode. The measurement runs within
the request; a large list belongs in the command or the scheduled task.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from ..evaluation.run import MODES, EvaluationError, evaluate
from ..models import Evaluation, JudgmentList
from .finetuning import document
from .pagination import SearchPagination
from .parsers import BoundedJSONParser
from .schema import OpenApiParameter, OpenApiTypes, error_responses, schema_class
from .serializers import NoUnknownKeysMixin


class EvaluationSerializer(serializers.ModelSerializer):
    list = serializers.CharField(source="judgment_list.name", read_only=True)

    class Meta:
        model = Evaluation
        fields = ["id", "list", "version", "mode", "metrics", "trigger", "seconds", "created_at"]
        read_only_fields = fields


class EvaluateRequestSerializer(NoUnknownKeysMixin, serializers.Serializer):
    list = serializers.CharField(help_text="The judgment list's name.")
    version = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        help_text="serving (default), base, or an encoder version string or id.",
    )
    modes = serializers.ListField(
        child=serializers.ChoiceField(choices=MODES),
        required=False,
        allow_null=True,
        allow_empty=False,
        default=None,
        help_text="Search modes; default (or null): every mode the list's field can do.",
    )
    store = serializers.BooleanField(default=True, help_text="Store the evaluations.")


VIEW_PERMISSION = "django_sbert.view_evaluation"
RUN_PERMISSION = "django_sbert.change_judgmentlist"  # as the admin's "Evaluate now"
STORE_PERMISSION = "django_sbert.add_evaluation"


class EvaluationPermissions(BasePermission):
    """Active staff users with ``view_evaluation`` to read, ``change_judgmentlist`` to measure
    (the view asks ``add_evaluation`` too when the result is stored): the admin's rules."""

    message = (
        "Reading evaluations needs the view_evaluation permission; measuring a judgment list "
        "needs change_judgmentlist, and storing the result add_evaluation (staff users only)."
    )

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_active and user.is_staff):
            return False
        if request.method in SAFE_METHODS:
            return user.has_perm(VIEW_PERMISSION)
        return user.has_perm(RUN_PERMISSION)


class EvaluationView(GenericAPIView):
    """GET: stored evaluations, newest first; POST: measure a judgment list now."""

    permission_classes = [EvaluationPermissions]
    parser_classes = [BoundedJSONParser]
    serializer_class = EvaluationSerializer
    pagination_class = SearchPagination
    schema = schema_class()

    def get_queryset(self) -> Any:
        qs = Evaluation.objects.select_related("judgment_list").order_by("-created_at", "-id")
        name = self.request.query_params.get("list")
        if name:
            qs = qs.filter(judgment_list__name=name)
        return qs

    @document(
        summary="Stored evaluations of judgment lists",
        parameters=[OpenApiParameter("list", OpenApiTypes.STR, description="Only this list's.")],
        responses={200: EvaluationSerializer(many=True), **error_responses(401, 403, 404)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        if page is not None:
            return self.get_paginated_response(self.get_serializer(page, many=True).data)
        return Response(self.get_serializer(self.get_queryset(), many=True).data)

    @document(
        summary="Measure a judgment list now",
        description=(
            "nDCG@10, Recall@10/@100, MRR@10 and the share of queries with no relevant row in "
            "the top 10, per search mode, for an encoder version; synchronous."
        ),
        request=EvaluateRequestSerializer,
        responses={201: EvaluationSerializer(many=True), **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        given = EvaluateRequestSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        if data["store"] and not request.user.has_perm(STORE_PERMISSION):
            self.permission_denied(
                request,
                message="Storing an evaluation needs the add_evaluation permission; send "
                '"store": false to measure without storing.',
            )
        judgment_list = JudgmentList.objects.filter(name=data["list"]).first()
        if judgment_list is None:
            raise ValidationError({"list": [f"No judgment list named {data['list']!r}."]})
        try:
            evaluations = evaluate(
                judgment_list,
                version=data["version"],
                modes=data["modes"],
                store=data["store"],
                trigger="manual",
            )
        except EvaluationError as exc:
            raise ValidationError({"detail": str(exc)}) from exc
        body = self.get_serializer(evaluations, many=True).data
        return Response(body, status=201 if data["store"] else 200)
