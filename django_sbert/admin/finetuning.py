"""Admin for fine-tuning: training pairs and training runs (the versions they make: ``versions``).

* Training pairs: list, filter, search, import CSV / JSONL, and the action "Fine-tune encoder
  on selected pairs" with a confirmation page (loss, epochs, learning rate...).
* Training runs: live progress bar, loss curve, metrics before / after, action "Cancel".

Every action requires a model permission; a user without it gets 403 (not a silently ignored
POST).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.html import format_html

from ..conf import sbert_settings
from ..exceptions import BrokerUnavailable, RunConflict
from ..finetuning import pairs as pair_io
from ..finetuning import runs
from ..finetuning.errors import error_for, error_message
from ..finetuning.examples import default_loss
from ..finetuning.options import OPTIONS, Hyperparameters
from ..finetuning.queues import training_worker_hint
from ..models import (
    EncoderVersion,
    RunStatus,
    TrainingPair,
    TrainingRun,
    pair_kind_counts,
)
from .display import metrics_table, progress_bar, search_table, training_curves
from .mixins import (
    ForbidMissingActionsMixin,
    StoredErrorAdminMixin,
    page_urls,
    render_page,
    require_permission,
)

__all__ = ["TrainingPairAdmin", "TrainingRunAdmin"]


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

    def hyperparameters(self) -> Hyperparameters:
        data = self.cleaned_data
        return Hyperparameters.from_options(data["loss"], data)


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
        import_page = ("import/", self.import_view, "django_sbert_trainingpair_import")
        return [*page_urls(self, import_page), *super().get_urls()]

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
        return render_page(
            self,
            request,
            "import_pairs.html",
            "Import training pairs",
            form=form,
            report=report,
            columns=", ".join(pair_io.COLUMNS),
            max_file_bytes=pair_io.max_file_bytes(),
        )

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
                except (RunConflict, BrokerUnavailable) as exc:
                    form.add_error(None, str(exc))
                else:
                    self.message_user(request, f"Training run {run.pk} queued.", messages.SUCCESS)
                    return HttpResponseRedirect(
                        reverse("admin:django_sbert_trainingrun_change", args=[run.pk])
                    )
        else:
            form = FineTuneForm(initial={"loss": default_loss(queryset)})
        return render_page(
            self,
            request,
            "fine_tune_confirm.html",
            "Fine-tune encoder",
            form=form,
            queryset=queryset,
            counts=pair_kind_counts(queryset),
            action_checkbox_name=admin.helpers.ACTION_CHECKBOX_NAME,
            # "Select all N" across pages: the confirmation posts that flag again rather than
            # every pk, which past DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) Django refuses (400).
            select_across=request.POST.get("select_across") == "1",
        )

    def has_start_training_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_sbert.add_trainingrun")


# --- training runs ----------------------------------------------------------------------------


@admin.register(TrainingRun)
class TrainingRunAdmin(StoredErrorAdminMixin, ForbidMissingActionsMixin, admin.ModelAdmin):
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

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        """The run's page; a queued run says so when no worker consumes the training queue."""
        context["worker_hint"] = self.worker_hint(context.get("original"))
        return super().render_change_form(request, context, *args, **kwargs)

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
        status_page = ("<int:pk>/status/", self.status_view, "django_sbert_trainingrun_status")
        return [*page_urls(self, status_page), *super().get_urls()]

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
