"""Admin for fine-tuning: training pairs, training runs, encoder versions.

* Training pairs: list, filter, search, import CSV / JSONL, and the action "Fine-tune encoder
  on selected pairs" with a confirmation page (loss, epochs, learning rate...).
* Training runs: live progress bar, loss curve, metrics before / after, action "Cancel".
* Encoder versions: metrics beside the active version's, actions "Promote", "Promote even if
  worse or not evaluated" (superusers: also a candidate the gate could not compare), "Roll
  back", "Stop promotion", and a "Before and after" page: the top results of the version it
  would replace (or replaced) and of this one side by side, for a few eval queries and any
  query typed in (``finetuning.compare``), over the rows the user may see in each model's own
  admin (its ``get_queryset(request)``, with its view permission; other models are left out,
  and the page says so). "Roll back" returns to the version active before this one was
  promoted (the promotion history); to a version forced past the gate, superusers only.
* Promotion history: every switch, read only.

Every action requires a model permission; a user without it gets 403 (not a silently ignored
POST).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from ..conf import sbert_settings
from ..exceptions import BrokerUnavailable, ServiceUnavailable
from ..finetuning import compare, promotion, runs
from ..finetuning import pairs as pair_io
from ..finetuning.errors import error_for, error_message, may_see_traceback
from ..finetuning.options import OPTIONS
from ..finetuning.queues import training_worker_hint
from ..models import (
    EncoderVersion,
    PromotionRecord,
    RunStatus,
    TrainingPair,
    TrainingRun,
    VersionStatus,
    pair_kind_counts,
)
from ..serving import forget_serving, serving_version
from .display import metrics_table, progress_bar, search_table, training_curves
from .mixins import ForbidMissingActionsMixin, require_permission

__all__ = ["EncoderVersionAdmin", "PromotionRecordAdmin", "TrainingPairAdmin", "TrainingRunAdmin"]


# --- training pairs -------------------------------------------------------------------------


class FineTuneForm(forms.Form):
    """The confirmation page of "Fine-tune encoder on selected pairs": the encoder, then one
    field per training option."""

    encoder = forms.ChoiceField()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(sbert_settings.ENCODERS)
        self.fields["encoder"].choices = [(n, n) for n in names]
        self.fields["encoder"].initial = "default" if "default" in names else names[0]

    def hyperparameters(self) -> runs.Hyperparameters:
        data = self.cleaned_data
        return runs.Hyperparameters.from_options(data["loss"], data)


# Declared like the encoder field, in OPTIONS' order: every form copies base_fields.
FineTuneForm.base_fields.update({option.name: option.form_field() for option in OPTIONS})


class ImportPairsForm(forms.Form):
    file = forms.FileField(help_text="CSV with a header row, or JSON Lines (.jsonl); UTF-8.")
    split = forms.ChoiceField(
        choices=[("train", "train"), ("eval", "eval")],
        initial="train",
        required=False,
        help_text="For rows without a split column (default train).",
    )
    source = forms.CharField(
        required=False,
        max_length=pair_io.max_length("source"),
        help_text="Default: the file's name (cut to fit, keeping the extension).",
    )
    skip_invalid = forms.BooleanField(
        required=False, help_text="Import the good rows even if some rows are bad."
    )

    def clean_file(self) -> Any:
        """Refuse a file over ``finetuning.pairs.MAX_FILE_BYTES`` before it is read."""
        upload = self.cleaned_data["file"]
        try:
            pair_io.check_file_size(upload.size)
        except pair_io.PairsImportError as exc:
            raise ValidationError(str(exc)) from None
        return upload


@admin.register(TrainingPair)
class TrainingPairAdmin(ForbidMissingActionsMixin, admin.ModelAdmin):
    list_display = ("short_a", "short_b", "kind", "score", "label", "split", "source", "created_at")
    list_filter = ("split", "source", "label")
    search_fields = ("text_a", "text_b", "source")
    actions = ["fine_tune_encoder"]
    change_list_template = "django_sbert/admin/trainingpair_change_list.html"

    @admin.display(description="text a")
    def short_a(self, obj: TrainingPair) -> str:
        return obj.text_a[:80]

    @admin.display(description="text b")
    def short_b(self, obj: TrainingPair) -> str:
        return obj.text_b[:80]

    def get_urls(self) -> list:
        custom = [
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="django_sbert_trainingpair_import",
            )
        ]
        return custom + super().get_urls()

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Upload a CSV / JSONL file of pairs; shows every rejected row, and a problem with
        the whole file (too large, not UTF-8) as an error on the file field."""
        require_permission(request, "django_sbert.add_trainingpair")
        report = None
        form = ImportPairsForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                report = pair_io.import_pairs(
                    upload,
                    pair_io.detect_format(upload.name),
                    split=form.cleaned_data["split"] or "train",
                    source=form.cleaned_data["source"] or pair_io.source_for_file(upload.name),
                    skip_invalid=form.cleaned_data["skip_invalid"],
                )
            except pair_io.PairsImportError as exc:
                form.add_error("file", str(exc))
        if report is not None:
            if report.created:
                self.message_user(request, f"Imported {report.created} pairs.", messages.SUCCESS)
            if report.ok:
                return HttpResponseRedirect(reverse("admin:django_sbert_trainingpair_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Import training pairs",
            "form": form,
            "report": report,
            "columns": ", ".join(pair_io.COLUMNS),
            "max_file_bytes": pair_io.max_file_bytes(),
        }
        return TemplateResponse(request, "django_sbert/admin/import_pairs.html", context)

    @admin.action(description="Fine-tune encoder on selected pairs", permissions=["start_training"])
    def fine_tune_encoder(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        if "confirm" in request.POST:
            form = FineTuneForm(request.POST)
            if form.is_valid():
                try:
                    run = runs.create_run(
                        form.cleaned_data["encoder"],
                        list(queryset.values_list("pk", flat=True)),
                        hyperparameters=form.hyperparameters(),
                        user=request.user,
                    )
                except ValidationError as exc:
                    form.add_error(None, exc)
                except (runs.RunConflict, BrokerUnavailable) as exc:
                    form.add_error(None, str(exc))
                else:
                    self.message_user(request, f"Training run {run.pk} queued.", messages.SUCCESS)
                    return HttpResponseRedirect(
                        reverse("admin:django_sbert_trainingrun_change", args=[run.pk])
                    )
        else:
            form = FineTuneForm(initial={"loss": runs.default_loss(queryset)})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Fine-tune encoder",
            "form": form,
            "queryset": queryset,
            "counts": _counts(queryset),
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            # "Select all N" across pages: the confirmation posts that flag again rather than
            # every pk, which past DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) Django refuses (400).
            "select_across": request.POST.get("select_across") == "1",
        }
        return TemplateResponse(request, "django_sbert/admin/fine_tune_confirm.html", context)

    def has_start_training_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_sbert.add_trainingrun")


def _counts(queryset: Any) -> dict[str, Any]:
    return pair_kind_counts(queryset)


# --- training runs ----------------------------------------------------------------------------


def _error_fields(request: HttpRequest, fields: Any, name: str) -> Any:
    """``fields`` with the stored error ``name`` (traceback included) for superusers, and for
    other staff its message only (the ``<name>_text`` display): a traceback shows the server's
    paths, settings and code."""
    if may_see_traceback(request.user):
        return fields
    return tuple(f"{name}_text" if field == name else field for field in fields)


@admin.register(TrainingRun)
class TrainingRunAdmin(ForbidMissingActionsMixin, admin.ModelAdmin):
    list_display = ("id", "encoder_name", "loss", "status", "progress", "created_at", "created_by")
    list_filter = ("status", "encoder_name", "loss")
    actions = ["cancel"]
    change_form_template = "django_sbert/admin/trainingrun_change_form.html"
    readonly_fields = (
        "encoder_name",
        "status",
        "progress",
        "loss_curve",
        "metrics",
        "search_metrics",
        "loss",
        "hyperparameters",
        "base_version",
        "candidate_link",
        "error",
        "created_by",
        "created_at",
        "started_at",
        "finished_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start from the pairs' action or manage.py sbert_train

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The run's page; a queued run says so when no worker consumes the training queue."""
        run = self.get_object(request, unquote(object_id))
        context = {**(extra_context or {}), "worker_hint": self.worker_hint(run)}
        return super().change_view(request, object_id, form_url, context)

    def worker_hint(self, run: TrainingRun | None) -> str | None:
        """Why a queued run may never start: no worker answered for the training queue.

        Asked only for a queued run while no run is running (a running one shows that a worker
        has the queue: busy, perhaps unable to answer); the answer is cached (``queues``).
        """
        if run is None or run.status != RunStatus.QUEUED:
            return None
        if TrainingRun.objects.filter(status=RunStatus.RUNNING).exists():
            return None
        return training_worker_hint()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _error_fields(request, super().get_fields(request, obj), "error")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _error_fields(request, super().get_readonly_fields(request, obj), "error")

    @admin.display(description="error")
    def error_text(self, obj: TrainingRun) -> str:
        return error_message(obj.error)

    @admin.display(description="progress")
    def progress(self, obj: TrainingRun) -> str:
        label = f"{obj.step} / {obj.total_steps} steps" if obj.total_steps else obj.status
        return progress_bar(obj.progress, label)

    @admin.display(description="loss curve and eval metric")
    def loss_curve(self, obj: TrainingRun) -> str:
        return training_curves(obj.loss_history, obj.evaluations)

    @admin.display(description="metrics on the eval split")
    def metrics(self, obj: TrainingRun) -> str:
        return metrics_table(("before", obj.metrics_before), ("after", obj.metrics_after))

    @admin.display(description="vector, keyword and hybrid search on the eval split")
    def search_metrics(self, obj: TrainingRun) -> str:
        return search_table(("before", obj.metrics_before), ("after", obj.metrics_after))

    @admin.display(description="candidate version")
    def candidate_link(self, obj: TrainingRun) -> str:
        candidate = EncoderVersion.objects.filter(run=obj).first()
        if candidate is None:
            return "-"
        url = reverse("admin:django_sbert_encoderversion_change", args=[candidate.pk])
        return format_html(
            '<a href="{}">{}</a> ({}) &middot; <a class="sbert-compare-link" href="{}">'
            "before and after</a>",
            url,
            candidate.version,
            candidate.get_status_display(),
            reverse("admin:django_sbert_encoderversion_compare", args=[candidate.pk]),
        )

    @admin.action(description="Cancel selected runs", permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: Any) -> None:
        cancelled = sum(runs.cancel_run(run) for run in queryset)
        self.message_user(request, f"Cancelled {cancelled} run(s).", messages.SUCCESS)

    def get_urls(self) -> list:
        custom = [
            path(
                "<int:pk>/status/",
                self.admin_site.admin_view(self.status_view),
                name="django_sbert_trainingrun_status",
            )
        ]
        return custom + super().get_urls()

    def status_view(self, request: HttpRequest, pk: int) -> JsonResponse:
        """What the change page polls while a run goes: status, progress, last loss."""
        require_permission(request, "django_sbert.view_trainingrun")
        run = get_object_or_404(TrainingRun, pk=pk)
        return JsonResponse(
            {
                "status": run.status,
                "step": run.step,
                "total_steps": run.total_steps,
                "progress": run.progress,
                "loss": run.loss_history[-1][1] if run.loss_history else None,
                "evaluations": run.evaluations,
                "finished": run.status not in (RunStatus.QUEUED, RunStatus.RUNNING),
                "error": error_for(request.user, run.error),
            }
        )


# --- encoder versions -------------------------------------------------------------------------


@admin.register(EncoderVersion)
class EncoderVersionAdmin(ForbidMissingActionsMixin, admin.ModelAdmin):
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

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _error_fields(request, super().get_fields(request, obj), "promotion_error")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return _error_fields(request, super().get_readonly_fields(request, obj), "promotion_error")

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
        custom = [
            path(
                "<int:pk>/compare/",
                self.admin_site.admin_view(self.compare_view),
                name="django_sbert_encoderversion_compare",
            )
        ]
        return custom + super().get_urls()

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
            queries = dict(eval_queries)
            if typed:
                queries = {typed: eval_queries.get(typed, [])}
            comparisons = compare.compare(version, before, queries, rows=visible.get)
        except compare.CompareError as exc:
            error = str(exc)
        except ServiceUnavailable as exc:  # the serving version's files, a search timeout
            error = f"Search is unavailable: {exc}"
        run = version.run
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Before and after: {version.version}",
            "version": version,
            "before": before,
            "before_label": compare.version_label(before) if before else "",
            "after_label": compare.version_label(version.version),
            "typed": typed,
            "left_out": left_out,
            "comparisons": comparisons,
            "error": error,
            "k": compare.K,
            "run": run,
            "run_metrics": metrics_table(
                ("before", run.metrics_before), ("after", run.metrics_after)
            )
            if run is not None
            else "",
        }
        return TemplateResponse(request, "django_sbert/admin/compare_versions.html", context)

    def visible_rows(
        self, request: HttpRequest, encoder_name: str
    ) -> tuple[dict[Any, Any], list[str]]:
        """The rows of each field of ``encoder_name`` that ``request.user`` may see here: its
        ModelAdmin's ``get_queryset(request)`` where the user has the model's view (or change)
        permission. Returns ({ref: queryset}, labels of the models left out)."""
        visible: dict[Any, Any] = {}
        left_out: list[str] = []
        for ref in promotion.fields_of(encoder_name):
            model_admin = self.admin_site._registry.get(ref.model)
            if model_admin is None or not model_admin.has_view_permission(request):
                label = str(ref.model._meta.verbose_name_plural)
                if label not in left_out:
                    left_out.append(label)
                continue
            visible[ref] = model_admin.get_queryset(request)
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
