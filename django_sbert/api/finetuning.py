"""The fine-tuning workflow over HTTP: pairs/, training-runs/, encoder-versions/.

The same operations as the admin (docs/fine-tuning.md), through the same functions
(``runs.create_run``, ``promotion.start_promotion`` ...), so the rules are the same
wherever they are used from: at most one run per encoder, the evaluation gate, superusers alone
may force a promotion. Every endpoint is for staff users holding the matching model permission
(``django_sbert.view_trainingpair``, ``add_trainingrun``, ``change_encoderversion`` ...):
reading needs ``view``, creating ``add``, deleting ``delete``, the actions (cancel, promote,
rollback) ``change``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ..exceptions import RollbackForbidden, RunConflict
from ..finetuning import promotion, runs
from ..finetuning.errors import error_for
from ..finetuning.examples import default_loss
from ..finetuning.options import (
    OPTION_NAMES,
    OPTIONS,
    Hyperparameters,
    adapt_hyperparameters,
)
from ..models import SPLITS, EncoderVersion, TrainingPair, TrainingRun, VersionStatus
from .errors import ServiceErrorsMixin
from .pagination import SearchPagination
from .parsers import BoundedJSONParser
from .permissions import DjangoModelViewPermissions
from .schema import (
    OpenApiParameter,
    OpenApiTypes,
    error_responses,
    extend_schema,
    extend_schema_field,
    schema_class,
)
from .serializers import NoUnknownKeysMixin


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


class StaffModelPermissions(DjangoModelViewPermissions):
    """Staff users with the model permission the method needs (view / add / change / delete).

    Actions that change state (cancel, promote, rollback) are POSTs that need ``change``.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_staff):
            return False
        if getattr(view, "action", None) in getattr(view, "change_actions", ()):
            model = view.get_queryset().model
            return request.user.has_perm(f"{model._meta.app_label}.change_{model._meta.model_name}")
        return super().has_permission(request, view)


CONFLICT_DESCRIPTION = (
    "Refused by the current state: a run of the encoder is already queued or running, the run "
    "has finished, the evaluation gate refused the promotion (the detail has the numbers), or "
    "another promotion is in progress."
)


def _errors(*codes: int) -> dict[int, Any]:
    """OpenAPI responses for ``codes``, with 409 described for the training workflow."""
    return error_responses(*codes, descriptions={409: CONFLICT_DESCRIPTION})


def document(**kwargs: Any) -> Any:
    """``extend_schema`` for one viewset method, on the sbert AutoSchema.

    drf-spectacular bases a method's schema on REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] unless the
    method carries a ``schema``; projects need not set that for schema/ to work.
    """

    def decorator(method: Any) -> Any:
        schema = schema_class()
        if schema is not None:
            method.schema = type(schema)
        return extend_schema(**kwargs)(method)

    return decorator


def _bad_request(exc: DjangoValidationError) -> ValidationError:
    return ValidationError({"detail": exc.messages})


class TrainingViewSet(ServiceErrorsMixin, viewsets.GenericViewSet):
    """What the three viewsets share: staff permissions, JSON bodies, paging, the schema."""

    permission_classes = [StaffModelPermissions]
    parser_classes = [BoundedJSONParser]
    pagination_class = SearchPagination  # ?page= / ?page_size=, sized by SBERT["API"]
    schema = schema_class()
    change_actions: tuple[str, ...] = ()


SPLIT_VALUES = [value for value, _ in SPLITS]  # pairs/?split=


def choice_param(request: Request, name: str, choices: list[str]) -> str | None:
    """``?name=``, one of ``choices``, or None when absent; 400 naming them otherwise (a
    misspelt filter would list nothing, as if there were nothing)."""
    value = request.query_params.get(name)
    if value and value not in choices:
        raise ValidationError({name: [f"{value!r} is not one of: {', '.join(choices)}."]})
    return value or None


# -- pairs/ ---------------------------------------------------------------------------------


class TrainingPairSerializer(NoUnknownKeysMixin, serializers.ModelSerializer):
    class Meta:
        model = TrainingPair
        fields = [
            "id",
            "text_a",
            "text_b",
            "text_negative",
            "score",
            "label",
            "split",
            "source",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]
        extra_kwargs = {
            "text_a": {"max_length": 20000, "trim_whitespace": False},
            "text_b": {"max_length": 20000, "trim_whitespace": False},
            "text_negative": {"max_length": 20000, "trim_whitespace": False},
            "score": {"min_value": 0.0, "max_value": 1.0},
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for name in ("text_a", "text_b"):
            if name in attrs and not attrs[name].strip():
                raise ValidationError({name: ["This text is blank."]})
        return attrs


MAX_PAIRS_PER_REQUEST = 1000


@extend_schema(tags=["training"])
class TrainingPairViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TrainingViewSet,
):
    """Training pairs: list (``?split=``, ``?source=``), create one or a list, delete."""

    queryset = TrainingPair.objects.all()
    serializer_class = TrainingPairSerializer

    def get_queryset(self) -> Any:
        queryset = TrainingPair.objects.order_by("-id")
        if self.action != "list":  # the filters are the list's (checked by list())
            return queryset
        for name in ("split", "source"):
            value = self.request.query_params.get(name)
            if value:
                queryset = queryset.filter(**{name: value})
        return queryset

    @document(
        parameters=[
            OpenApiParameter("split", OpenApiTypes.STR, enum=SPLIT_VALUES),
            OpenApiParameter("source", OpenApiTypes.STR),
        ],
        responses={200: TrainingPairSerializer(many=True), **_errors(400, 403, 404)},
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        choice_param(request, "split", SPLIT_VALUES)  # after the permissions
        return super().list(request, *args, **kwargs)

    @document(responses={200: TrainingPairSerializer, **_errors(403, 404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @document(responses={204: None, **_errors(403, 404)})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().destroy(request, *args, **kwargs)

    @document(
        request=TrainingPairSerializer,
        responses={201: TrainingPairSerializer(many=True), **_errors(400, 403, 413, 415)},
        description=f"One pair, or a list of up to {MAX_PAIRS_PER_REQUEST}; all or nothing.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        many = isinstance(request.data, list)
        if many and not 1 <= len(request.data) <= MAX_PAIRS_PER_REQUEST:
            raise ValidationError(
                {"detail": [f"Send 1 to {MAX_PAIRS_PER_REQUEST} pairs per request."]}
            )
        serializer = self.get_serializer(data=request.data, many=many)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            serializer.save()
        return Response(serializer.data, status=status.HTTP_201_CREATED)


# -- training-runs/ ------------------------------------------------------------------------


ERROR_HELP = "Why it failed: with the traceback for superusers, the message alone for other staff."


class StoredErrorMixin:
    """Shows the stored error fields (``error_fields``) whole to superusers only; other staff get
    the message without the traceback. Needs ``context={"request": request}``; without one,
    the message only."""

    error_fields: tuple[str, ...] = ()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)  # type: ignore[misc]
        request = self.context.get("request")  # type: ignore[attr-defined]
        user = getattr(request, "user", None)
        for name in self.error_fields:
            if data.get(name):
                data[name] = error_for(user, data[name])
        return data


class TrainingRunSerializer(StoredErrorMixin, serializers.ModelSerializer):
    error_fields = ("error",)
    progress = serializers.FloatField(read_only=True, help_text="Share of the steps done.")
    candidate = serializers.SerializerMethodField(help_text="Version the run produced.")

    class Meta:
        model = TrainingRun
        fields = [
            "id",
            "encoder_name",
            "base_version",
            "loss",
            "hyperparameters",
            "status",
            "step",
            "total_steps",
            "progress",
            "loss_history",
            "metrics_before",
            "metrics_after",
            "evaluations",
            "error",
            "candidate",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields
        extra_kwargs = {"error": {"help_text": ERROR_HELP}}

    def get_candidate(self, run: TrainingRun) -> str | None:
        version = EncoderVersion.objects.filter(run=run).values_list("version", flat=True)
        return version.first()


class TrainingRunRequestSerializer(NoUnknownKeysMixin, serializers.Serializer):
    encoder = serializers.CharField(default="default", max_length=100)
    pairs = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        max_length=100000,
        help_text="Ids of the pairs to use; omit to use every pair (optionally of one source).",
    )
    source = serializers.CharField(required=False, max_length=200)
    content = serializers.RegexField(
        r"^\w+\.\w+\.\w+$",
        required=False,
        help_text="'app_label.Model.field': adapt to that field's text, no pairs (loss "
        "margin_mse: pseudo-queries cut from the text, scored by a teacher fusing the model "
        "with BM25; mnrl: the pseudo-queries as pairs; or simcse).",
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        """The request's fields, then one per training option (``finetuning.options``)."""
        fields = super().get_fields()
        fields.update({option.name: option.serializer_field() for option in OPTIONS})
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "content" in attrs and ("pairs" in attrs or "source" in attrs):
            raise ValidationError("Send either content or pairs/source, not both.")
        return attrs


@extend_schema(tags=["training"])
class TrainingRunViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TrainingViewSet
):
    """Fine-tuning runs: start one, follow its progress and metrics, cancel it."""

    queryset = TrainingRun.objects.all()
    serializer_class = TrainingRunSerializer
    change_actions = ("cancel",)

    def get_queryset(self) -> Any:
        return TrainingRun.objects.order_by("-id")

    @document(responses={200: TrainingRunSerializer(many=True), **_errors(403, 404)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @document(responses={200: TrainingRunSerializer, **_errors(403, 404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @document(
        request=TrainingRunRequestSerializer,
        responses={201: TrainingRunSerializer, **_errors(400, 403, 409, 413, 415, 503)},
        description="Queue a run on the training queue. 409 while another run of the same "
        "encoder is queued or running.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = TrainingRunRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        content = data.get("content")
        if content:
            pair_ids: list[int] = []
            given = {name: data[name] for name in OPTION_NAMES if name in request.data}
            hyperparameters = adapt_hyperparameters(data.get("loss"), **given)
        else:
            pairs = TrainingPair.objects.all()
            if "pairs" in data:
                pairs = pairs.filter(pk__in=data["pairs"])
            if "source" in data:
                pairs = pairs.filter(source=data["source"])
            pair_ids = list(pairs.values_list("pk", flat=True))
            if not pair_ids:
                raise ValidationError({"pairs": ["No training pairs match."]})
            loss = data.get("loss") or default_loss(pairs)
            hyperparameters = Hyperparameters.from_options(loss, data)
        try:
            run = runs.create_run(
                data["encoder"],
                pair_ids,
                hyperparameters=hyperparameters,
                content=content,
                user=request.user,
            )
        except DjangoValidationError as exc:
            raise _bad_request(exc) from exc
        except ImproperlyConfigured as exc:  # an encoder name that is not configured
            raise ValidationError({"encoder": [str(exc)]}) from exc
        except LookupError as exc:  # content names no model or field with embeddings
            # args[0]: the message as written (str() of a KeyError would quote it)
            raise ValidationError({"content": [str(exc.args[0] if exc.args else exc)]}) from exc
        except RunConflict as exc:
            raise Conflict(str(exc)) from exc
        return Response(
            TrainingRunSerializer(run, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    @document(request=None, responses={200: TrainingRunSerializer, **_errors(403, 404, 409)})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Ask a queued or running run to stop (409 when it has already finished)."""
        run = self.get_object()
        if not runs.cancel_run(run):
            raise Conflict(f"Run {run.pk} has already finished ({run.status}).")
        run.refresh_from_db()
        return Response(TrainingRunSerializer(run, context=self.get_serializer_context()).data)


# -- encoder-versions/ -----------------------------------------------------------------------


class EncoderVersionSerializer(StoredErrorMixin, serializers.ModelSerializer):
    error_fields = ("promotion_error",)
    promotion_progress = serializers.FloatField(read_only=True)
    run = serializers.PrimaryKeyRelatedField(read_only=True)
    gate = serializers.SerializerMethodField(
        help_text="The evaluation gate of the promotion under way or last asked: state "
        "(pending, running, passed, refused, not evaluated, skipped), detail (the numbers) "
        "and step [done, total] while the promotion task measures."
    )

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "state": {"type": "string"},
                "detail": {"type": "string"},
                "step": {"type": "array", "items": {"type": "integer"}, "nullable": True},
                "forced": {"type": "boolean"},
            },
        }
    )
    def get_gate(self, version: EncoderVersion) -> dict[str, Any] | None:
        request = version.promotion_request or {}
        if not request.get("gate"):
            return None
        return {
            "state": request["gate"],
            "detail": request.get("gate_detail") or "",
            "step": request.get("gate_step"),
            "forced": bool(request.get("force")),
        }

    class Meta:
        model = EncoderVersion
        fields = [
            "id",
            "encoder_name",
            "version",
            "is_base",
            "parent",
            "run",
            "metrics",
            "status",
            "created_at",
            "activated_at",
            "replaced",
            "staged_rows",
            "total_rows",
            "promotion_progress",
            "promotion_error",
            "gate",
        ]
        read_only_fields = fields
        extra_kwargs = {"promotion_error": {"help_text": ERROR_HELP}}


class PromoteRequestSerializer(NoUnknownKeysMixin, serializers.Serializer):
    force = serializers.BooleanField(
        default=False,
        help_text="Promote even if the gate refuses: a worse candidate, or one it could not "
        "compare ('no evaluation: ...'). Superusers only.",
    )


@extend_schema(tags=["training"])
class EncoderVersionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TrainingViewSet):
    """Encoder versions: compare them, promote a candidate, roll back the active one."""

    queryset = EncoderVersion.objects.all()
    serializer_class = EncoderVersionSerializer
    change_actions = ("promote", "rollback")

    def get_queryset(self) -> Any:
        queryset = EncoderVersion.objects.select_related("run").order_by("-id")
        if self.request is None or self.action != "list":  # the list's filter (list() checks it)
            return queryset
        value = self.request.query_params.get("status")
        if value:
            queryset = queryset.filter(status=value)
        return queryset

    @document(
        parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=VersionStatus.values)],
        responses={200: EncoderVersionSerializer(many=True), **_errors(400, 403, 404)},
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        choice_param(request, "status", VersionStatus.values)  # after the permissions
        return super().list(request, *args, **kwargs)

    @document(responses={200: EncoderVersionSerializer, **_errors(403, 404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @document(
        request=PromoteRequestSerializer,
        responses={
            202: EncoderVersionSerializer,
            **_errors(400, 403, 404, 409, 413, 415, 503),
        },
        description="Stage the version's vectors in the background, then switch every field "
        "of its encoder to them in one transaction. Follow staged_rows / total_rows. When the "
        "gate must encode both versions it runs in the background first (gate.state pending, "
        "then running with gate.step); a refusal then puts the version back to candidate with "
        "the numbers in promotion_error. 409 when the gate refuses at once: a worse "
        "candidate, or one it could not compare (run deleted, no eval pairs, a content run: "
        "'no evaluation: ...'); only a superuser may force either.",
    )
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str | None = None) -> Response:
        version = self.get_object()
        body = PromoteRequestSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        force = body.validated_data["force"]
        if force and not request.user.is_superuser:
            raise PermissionDenied("Only a superuser may force a promotion past the gate.")
        try:
            verdict = promotion.start_promotion(
                version, force=force, user=request.user, reason="API: promote"
            )
        except promotion.PromotionRefused as exc:
            raise Conflict(str(exc)) from exc
        version.refresh_from_db()
        data = dict(EncoderVersionSerializer(version, context=self.get_serializer_context()).data)
        if verdict is not None:
            data["gate"] = {**(data["gate"] or {}), "passed": verdict.passed}
        else:  # measured by the promotion task: follow gate.state, then status
            data["gate"] = {**(data["gate"] or {}), "passed": None}
        return Response(data, status=status.HTTP_202_ACCEPTED)

    @document(
        request=None,
        responses={202: EncoderVersionSerializer, **_errors(403, 404, 409, 503)},
        description="Switch back to the version that was active before this one was promoted "
        "(the promotion history: rolling back twice goes further back, never forward; "
        "instantly when its vectors are still kept). 403 when that version was forced past "
        "the evaluation gate and the user is not a superuser.",
    )
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        version = self.get_object()
        try:
            previous = promotion.rollback(version, user=request.user, reason="API: roll back")
        except RollbackForbidden as exc:
            raise PermissionDenied(str(exc)) from exc
        except promotion.PromotionRefused as exc:
            raise Conflict(str(exc)) from exc
        previous.refresh_from_db()
        return Response(
            EncoderVersionSerializer(previous, context=self.get_serializer_context()).data,
            status=status.HTTP_202_ACCEPTED,
        )
