"""Admin for encoder versions (what serves, and how that changes) and the promotion history.

* Encoder versions: metrics beside the active version's, actions "Promote", "Promote even if
  worse or not evaluated" (superusers), "Roll back", "Stop promotion", and a "Before and
  after" page (``finetuning.compare``) over the rows the user may see in each model's own
  admin (its ``get_queryset(request)``, with its view permission).
* Promotion history: every switch, read only.

Every action requires a model permission; a user without it gets 403 (not a silently ignored
POST).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ..exceptions import BrokerUnavailable, ServiceUnavailable
from ..finetuning import compare, promotion
from ..finetuning.errors import error_message
from ..models import EncoderVersion, PromotionRecord, VersionStatus
from ..serving import forget_serving, serving_version
from .display import metrics_table, progress_bar, search_table
from .mixins import (
    ForbidMissingActionsMixin,
    StoredErrorAdminMixin,
    page_urls,
    render_page,
    require_permission,
    viewing_admin,
)

__all__ = ["EncoderVersionAdmin", "PromotionRecordAdmin"]


@admin.register(EncoderVersion)
class EncoderVersionAdmin(StoredErrorAdminMixin, ForbidMissingActionsMixin, admin.ModelAdmin):
    list_display = ("version", "encoder_name", "status", "compared", "promotion", "activated_at")
    list_filter = ("encoder_name", "status")
    actions = ["promote", "promote_even_if_worse", "rollback", "stop_promotion"]
    readonly_fields = (
        "version",
        "encoder_name",
        "status",
        "compared",
        "search_metrics",
        "promotion",
        "before_and_after",
        "directory",
        "is_base",
        "parent",
        "replaced",
        "run",
        "promotion_error",
        "history",
        "created_at",
        "activated_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # versions come from training runs

    error_field = "promotion_error"

    @admin.display(description="promotion error")
    def promotion_error_text(self, obj: EncoderVersion) -> str:
        return error_message(obj.promotion_error)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The serving version (and one being promoted) cannot be deleted: rows hold its vectors.
        if obj is not None and obj.status in (VersionStatus.ACTIVE, VersionStatus.PROMOTING):
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict:
        # action_location: Django 6.1's argument (see EmbeddingAdminMixin.get_actions).
        where = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **where)
        actions.pop("delete_selected", None)  # it would not ask has_delete_permission(obj)
        return actions

    @admin.display(description="metrics: this version | active")
    def compared(self, obj: EncoderVersion) -> str:
        if obj.status == VersionStatus.ACTIVE:
            return metrics_table(("this version (active)", obj.metrics))
        serving = serving_version(obj.encoder_name)
        active = EncoderVersion.objects.filter(
            encoder_name=obj.encoder_name, status=VersionStatus.ACTIVE
        ).first()
        if obj.run is not None and obj.run.base_version == serving:
            # The run measured the serving version on the same eval pairs before training.
            other = obj.run.metrics_before
        elif active is not None:
            other = active.metrics  # measured on the active version's own eval split
        else:
            other = {}
        return metrics_table(("this version", obj.metrics), ("active", other))

    @admin.display(description="vector, keyword and hybrid search on its eval split")
    def search_metrics(self, obj: EncoderVersion) -> str:
        table = search_table(("this version", obj.metrics))
        if obj.metrics.get("hybrid_error"):  # no fusion could be tuned: the site's serves
            return format_html(
                "{}<p class='errornote'>Keyword and hybrid search could not be measured, so "
                "this version uses the site's fusion settings: {}</p>",
                table,
                obj.metrics["hybrid_error"],
            )
        return table

    @admin.display(description="promotion")
    def promotion(self, obj: EncoderVersion) -> str:
        request = obj.promotion_request or {}
        if obj.status != VersionStatus.PROMOTING:
            # The last promotion's verdict (its refusal, if any, is the promotion error).
            detail = request.get("gate_detail")
            return format_html("gate: {}", detail) if detail else "-"
        if request.get("gate") in ("pending", "running"):
            done, total = request.get("gate_step") or (0, 3)
            label = "evaluation gate: waiting for a worker"
            if request["gate"] == "running":
                label = f"evaluation gate: measuring both versions ({done} / {total} steps)"
            return progress_bar(done / total if total else 0.0, label)
        return progress_bar(obj.promotion_progress, f"{obj.staged_rows} / {obj.total_rows} rows")

    @admin.display(description="promotion history")
    def history(self, obj: EncoderVersion) -> str:
        records = PromotionRecord.objects.filter(encoder_name=obj.encoder_name).filter(
            Q(to_version=obj.version) | Q(from_version=obj.version)
        )[:20]
        if not records:
            return "-"
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                "<li>{}: {} &rarr; {} ({}{}) by {}{}</li>",
                (
                    (
                        record.created_at.strftime("%Y-%m-%d %H:%M"),
                        record.from_version,
                        record.to_version,
                        record.kind,
                        ", forced" if record.forced else "",
                        record.username or "-",
                        f", undone by a rollback on {record.undone_by.created_at:%Y-%m-%d %H:%M}"
                        if record.undone_by
                        else "",
                    )
                    for record in records
                ),
            ),
        )

    @admin.display(description="before and after")
    def before_and_after(self, obj: EncoderVersion) -> str:
        url = reverse("admin:django_sbert_encoderversion_compare", args=[obj.pk])
        return format_html(
            '<a class="sbert-compare-link" href="{}">Compare the top results with the version '
            "it would replace (or replaced)</a>",
            url,
        )

    def get_urls(self) -> list:
        compare_page = (
            "<int:pk>/compare/",
            self.compare_view,
            "django_sbert_encoderversion_compare",
        )
        return [*page_urls(self, compare_page), *super().get_urls()]

    def compare_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Before and after: the top results of both versions for a few eval queries and the
        query typed in (``?q=``), with nDCG@10 per eval query and the run's metrics."""
        require_permission(request, "django_sbert.view_encoderversion")
        version = get_object_or_404(EncoderVersion, pk=pk)
        typed = (request.GET.get("q") or "").strip()[:500]
        error = None
        before = None
        comparisons: list[compare.Comparison] = []
        eval_queries = compare.eval_queries(version)
        visible, left_out = self.visible_rows(request, version.encoder_name)
        try:
            before = compare.baseline_version(version)
            queries = {typed: eval_queries.get(typed, [])} if typed else eval_queries
            comparisons = compare.compare(version, before, queries, rows=visible.get)
        except compare.CompareError as exc:
            error = str(exc)
        except ServiceUnavailable as exc:  # the serving version's files, a search timeout
            error = f"Search is unavailable: {exc}"
        run = version.run
        return render_page(
            self,
            request,
            "compare_versions.html",
            f"Before and after: {version.version}",
            version=version,
            before=before,
            before_label=compare.version_label(before) if before else "",
            after_label=compare.version_label(version.version),
            typed=typed,
            left_out=left_out,
            comparisons=comparisons,
            error=error,
            k=compare.K,
            run=run,
            run_metrics=metrics_table(("before", run.metrics_before), ("after", run.metrics_after))
            if run is not None
            else "",
        )

    def visible_rows(
        self, request: HttpRequest, encoder_name: str
    ) -> tuple[dict[Any, Any], list[str]]:
        """The rows of each field of ``encoder_name`` that ``request.user`` may see here: its
        ModelAdmin's ``get_queryset(request)`` where the user has the model's view (or change)
        permission. Returns ({ref: queryset}, labels of the models left out)."""
        visible: dict[Any, Any] = {}
        left_out: list[str] = []
        for ref in promotion.fields_of(encoder_name):
            if model_admin := viewing_admin(self.admin_site, request, ref.model):
                visible[ref] = model_admin.get_queryset(request)
            elif (label := str(ref.model._meta.verbose_name_plural)) not in left_out:
                left_out.append(label)
        return visible, left_out

    def _promote(self, request: HttpRequest, queryset: Any, *, force: bool) -> None:
        for version in queryset:
            try:
                verdict = promotion.start_promotion(
                    version, force=force, user=request.user, reason="admin: promote"
                )
            except (promotion.PromotionRefused, BrokerUnavailable) as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                if verdict is None:
                    note = (
                        ". The evaluation gate measures it against the active version first, "
                        "in the background: follow it on the version's page"
                    )
                else:
                    note = f" ({verdict.describe()})"
                self.message_user(
                    request,
                    f"Promoting {version}: its vectors are being computed{note}. Search keeps "
                    "using the current version until the switch.",
                    messages.SUCCESS,
                )

    @admin.action(description="Promote selected version", permissions=["change"])
    def promote(self, request: HttpRequest, queryset: Any) -> None:
        self._promote(request, queryset, force=False)

    @admin.action(
        description="Promote even if worse or not evaluated (superusers)", permissions=["force"]
    )
    def promote_even_if_worse(self, request: HttpRequest, queryset: Any) -> None:
        self._promote(request, queryset, force=True)

    def has_force_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    @admin.action(description="Roll back to the previous version", permissions=["change"])
    def rollback(self, request: HttpRequest, queryset: Any) -> None:
        for version in queryset:
            try:
                target = promotion.rollback(version, user=request.user, reason="admin: roll back")
            except (promotion.PromotionRefused, BrokerUnavailable) as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, f"Rolling back {version} to {target}.", messages.SUCCESS)

    @admin.action(description="Stop promotion", permissions=["change"])
    def stop_promotion(self, request: HttpRequest, queryset: Any) -> None:
        for version in queryset.filter(status=VersionStatus.PROMOTING):
            promotion.cancel_promotion(version)
        forget_serving()


@admin.register(PromotionRecord)
class PromotionRecordAdmin(admin.ModelAdmin):
    """Every switch of a serving version, read only: who promoted or rolled back what, when,
    why, and whether it was forced past the evaluation gate."""

    list_display = (
        "created_at",
        "encoder_name",
        "from_version",
        "to_version",
        "kind",
        "forced",
        "username",
        "undone_by",
    )
    list_filter = ("encoder_name", "kind", "forced")
    readonly_fields = (*list_display, "gate", "reason", "user")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a record is written by the switch it records, and kept

    has_change_permission = has_delete_permission = has_add_permission
