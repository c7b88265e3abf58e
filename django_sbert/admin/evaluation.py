"""Admin for measuring search: judgment lists, grading, import, "Evaluate now", quality over time.

* Judgment lists: their queries (each with its count of graded rows) and, on a query's page,
  its judgments (row pk and grade 0-3), editable; the list's page charts each mode's nDCG@10
  and Recall@10 over its stored evaluations, with the promotions marked.
* Grade: for a list (or a new one) and a query typed in, the serving version's top 10 rows
  and a candidate version's top 10 side by side, a grade per row, saved into the list (the
  work of it: ``admin/grading.py``).
* Import: a CSV, JSON Lines or TREC qrels file (``evaluation.judgments``), or the eval pairs.
* Evaluate now: ``evaluation.run.evaluate`` for a version (serving, base, a candidate), every
  mode's metrics and the ``min_similarity`` threshold measured on the list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from ..evaluation import judgments as judgment_io
from ..evaluation import run as evaluation_run
from ..exceptions import JudgmentsImportError, ServiceUnavailable
from ..finetuning import compare
from ..indexing import FieldRef, field_refs
from ..models import EncoderVersion, Evaluation, JudgedQuery, Judgment, JudgmentList
from ..serving import serving_version
from . import grading
from .display import figure, html_table, time_chart_svg
from .mixins import ForbidMissingActionsMixin, page_urls, render_page, require_permission

__all__ = ["JudgedQueryAdmin", "JudgmentListAdmin"]

METRICS = evaluation_run.METRIC_KEYS[:5]  # the table's: ndcg@10 .. no_relevant@10


# --- metrics and the chart --------------------------------------------------------------------


def evaluations_table(evaluations: Sequence[Evaluation]) -> str:
    """One row per evaluation: version, mode, the metrics, the measured threshold."""
    if not evaluations:
        return "-"

    def threshold(metrics: dict[str, Any]) -> str:
        found = metrics.get("threshold") or {}
        if found.get("min_similarity") is None:
            return "-"
        return f"{found['min_similarity']:.3f} (precision {found.get('precision', 0.5):g})"

    head = ["when", "version", "mode", "trigger", *METRICS, "queries", "min_similarity", "fusion"]
    rows = (
        [
            e.created_at.strftime("%Y-%m-%d %H:%M") if e.created_at else "not stored",
            e.version,
            e.mode,
            e.trigger,
            *(figure(e.metrics.get(n)) for n in METRICS),
            e.metrics.get("queries", "-"),
            threshold(e.metrics),
            fusion_cell(e.metrics.get("fusion")),
        ]
        for e in evaluations
    )
    return html_table(head, rows, "sbert-evaluations")


def fusion_cell(report: dict[str, Any] | None) -> str:
    """A hybrid evaluation's fusions side by side (``evaluation.run.fusion_report``): the
    settings' and the version's tuned nDCG@10 on the list, which serves, and how the fusion
    tuned on part of the list did on the rest; "-" for other modes."""
    if not report:
        return "-"
    parts = [f"settings' {figure(report['settings'].get('ndcg@10'))}"]
    if report.get("tuned"):
        parts.append(f"tuned {figure(report['tuned'].get('ndcg@10'))}")
    parts[-1] += " (serves)"
    tried = report.get("list") or {}
    if tried.get("heldout_tuned_ndcg@10") is None:
        parts.append(f"tuned on the list: {tried.get('heldout_queries', 0)} held-out, too few")
    else:
        verdict = ("kept" if tried.get("kept") else "wins") if tried.get("wins") else "no gain"
        parts.append(
            f"tuned on the list: {figure(tried['heldout_current_ndcg@10'])} -> "
            f"{figure(tried['heldout_tuned_ndcg@10'])} on {tried['heldout_queries']} held-out "
            f"queries, {verdict}"
        )
    return "; ".join(parts)


def quality_over_time(judgment_list: JudgmentList) -> str:
    """The chart of a list's page: each mode's nDCG@10 and Recall@10 over the evaluations of
    the versions that served (candidates measured on the side are left out), a vertical line
    per promotion of the list's encoder."""
    never_served = EncoderVersion.objects.filter(activated_at__isnull=True).values("version")
    evaluations = judgment_list.evaluations.exclude(version__in=never_served)
    series: dict[tuple[str, str], list[tuple[Any, float, str]]] = {}
    for e in evaluations.order_by("created_at", "id"):
        for metric in ("ndcg@10", "recall@10"):
            value = e.metrics.get(metric)
            if value is not None:
                series.setdefault((e.mode, metric), []).append(
                    (e.created_at, float(value), f"{e.version}, {e.trigger}")
                )
    try:
        encoder_name = grading.ref_of_list(judgment_list).encoder_name
    except LookupError:
        encoder_name = None
    promotions = (
        EncoderVersion.objects.filter(encoder_name=encoder_name, activated_at__isnull=False)
        .exclude(is_base=True)
        .order_by("activated_at")
        .values_list("activated_at", "version")
        if encoder_name
        else []
    )
    return time_chart_svg(series, list(promotions))


# --- forms --------------------------------------------------------------------------------------


class ImportJudgmentsForm(forms.Form):
    """Upload a file of judgments into a list (new or existing), or take the eval pairs."""

    name = forms.CharField(max_length=200, help_text="An existing list's name adds to it.")
    target = forms.ChoiceField(label="rows of", help_text="The model and EmbeddingField graded.")
    source = forms.ChoiceField(
        choices=[("file", "a file (below)"), ("eval_pairs", "the eval pairs")], initial="file"
    )
    file = forms.FileField(
        required=False,
        help_text="CSV or JSON Lines (query, object_pk or doc_id, grade 0-3), or TREC qrels "
        "(qid 0 doc_id grade); UTF-8.",
    )
    format = forms.ChoiceField(
        required=False,
        choices=[("", "by the file's name"), *((f, f) for f in judgment_io.FORMATS)],
        help_text=".jsonl is JSON Lines, .qrels / .trec / .tsv / .txt TREC qrels, else CSV.",
    )
    queries = forms.FileField(
        required=False,
        help_text="TREC only: the queries (qid<TAB>text lines, or JSON Lines with _id, text).",
    )
    id_field = forms.CharField(
        required=False,
        max_length=100,
        help_text="The model field holding each row's doc_id (TREC: the pk by default).",
    )
    skip_invalid = forms.BooleanField(
        required=False, help_text="Import the good lines even if some lines are bad."
    )

    def __init__(self, *args: Any, refs: Sequence[FieldRef] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = [(grading.ref_key(r), str(r)) for r in refs]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("source") == "file" and not data.get("file"):
            self.add_error("file", "Choose a file, or import the eval pairs.")
        return data


class EvaluateForm(forms.Form):
    version = forms.ChoiceField(required=False, help_text="Serving by default.")
    modes = forms.MultipleChoiceField(
        choices=[(m, m) for m in evaluation_run.MODES],
        initial=list(evaluation_run.MODES),
        widget=forms.CheckboxSelectMultiple,
        help_text="Modes the field cannot do are left out.",
    )
    store = forms.BooleanField(
        required=False, initial=True, help_text="Keep it for the quality-over-time chart."
    )

    def __init__(self, *args: Any, encoder_name: str = "default", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        serving = serving_version(encoder_name)
        others = (
            EncoderVersion.objects.filter(encoder_name=encoder_name)
            .exclude(version=serving)
            .order_by("-created_at")
        )
        self.fields["version"].choices = [
            ("", f"serving ({serving})"),
            ("base", "base model (the settings' model)"),
            *((v.version, f"{v.version} ({v.get_status_display()})") for v in others),
        ]


# --- the ModelAdmins ------------------------------------------------------------------------------


class JudgedQueryInline(admin.TabularInline):
    model = JudgedQuery
    fields = ("text", "graded", "grades_link")
    readonly_fields = ("graded", "grades_link")
    extra = 0
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> Any:
        graded, relevant = Count("judgments"), Count("judgments", filter=Q(judgments__grade__gt=0))
        return super().get_queryset(request).annotate(graded_count=graded, relevant_count=relevant)

    @admin.display(description="graded rows (relevant)")
    def graded(self, obj: JudgedQuery) -> str:
        if obj.pk is None:
            return "-"
        return f"{getattr(obj, 'graded_count', 0)} ({getattr(obj, 'relevant_count', 0)})"

    @admin.display(description="grade")
    def grades_link(self, obj: JudgedQuery) -> str:
        if obj.pk is None:
            return "-"
        url = reverse("admin:django_sbert_judgmentlist_grade")
        query = urlencode({"list": obj.judgment_list_id, "q": obj.text})
        return format_html('<a href="{}?{}">grade its top rows</a>', url, query)


class JudgmentInline(admin.TabularInline):
    model = Judgment
    fields = ("object_pk", "grade")
    extra = 1


@admin.register(JudgedQuery)
class JudgedQueryAdmin(admin.ModelAdmin):
    list_display = ("text", "judgment_list")
    list_filter = ("judgment_list",)
    search_fields = ("text",)
    inlines = [JudgmentInline]


class JudgmentListForm(forms.ModelForm):
    """A list names a model with an EmbeddingField, and that field."""

    class Meta:
        model = JudgmentList
        fields = ("name", "content_type", "field", "description")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "content_type" in self.fields:
            models_ = {ref.model for ref in field_refs()}
            pks = [ContentType.objects.get_for_model(m).pk for m in models_]
            self.fields["content_type"].queryset = ContentType.objects.filter(pk__in=pks)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        content_type, name = data.get("content_type"), data.get("field")
        model = content_type.model_class() if content_type else None
        if model is not None and name:
            names = [ref.name for ref in field_refs(model)]
            if name not in names:
                self.add_error(
                    "field",
                    f"{model._meta.label} has no EmbeddingField {name!r}; "
                    f"it has: {', '.join(names) or 'none'}.",
                )
        return data


@admin.register(JudgmentList)
class JudgmentListAdmin(ForbidMissingActionsMixin, admin.ModelAdmin):
    form = JudgmentListForm
    list_display = ("name", "content_type", "field", "query_count", "latest", "updated_at")
    search_fields = ("name", "description")
    inlines = [JudgedQueryInline]
    actions = ["evaluate_now"]
    change_list_template = "django_sbert/admin/judgmentlist_change_list.html"

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).annotate(query_total=Count("queries"))

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = ["name", "content_type", "field", "description"]
        if obj is not None:
            fields += ["pages", "quality_chart", "recent_evaluations"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("pages", "quality_chart", "recent_evaluations") if obj is not None else ()

    @admin.display(description="queries", ordering="query_total")
    def query_count(self, obj: JudgmentList) -> int:
        return getattr(obj, "query_total", 0)

    @admin.display(description="latest nDCG@10")
    def latest(self, obj: JudgmentList) -> str:
        found = obj.evaluations.order_by("-created_at", "-id").first()
        if found is None or found.metrics.get("ndcg@10") is None:
            return "-"
        return f"{found.metrics['ndcg@10']:.4f} ({found.mode}, {found.version})"

    @admin.display(description="")
    def pages(self, obj: JudgmentList) -> str:
        grade = reverse("admin:django_sbert_judgmentlist_grade")
        return format_html(
            '<a class="sbert-grade-link" href="{}?list={}">Grade a query\'s top rows</a> &middot; '
            '<a class="sbert-evaluate-link" href="{}">Evaluate now</a>',
            grade,
            obj.pk,
            reverse("admin:django_sbert_judgmentlist_evaluate", args=[obj.pk]),
        )

    @admin.display(description="quality over time")
    def quality_chart(self, obj: JudgmentList) -> str:
        return quality_over_time(obj)

    @admin.display(description="latest evaluations")
    def recent_evaluations(self, obj: JudgmentList) -> str:
        return evaluations_table(list(obj.evaluations.order_by("-created_at", "-id")[:12]))

    @admin.action(
        description="Evaluate now (the serving version, every mode)", permissions=["change"]
    )
    def evaluate_now(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        if queryset.count() == 1:
            target = reverse("admin:django_sbert_judgmentlist_evaluate", args=[queryset.get().pk])
            return HttpResponseRedirect(target)
        if not request.user.has_perm("django_sbert.add_evaluation"):
            # It stores what it measures: the evaluate page's "store" needs the same.
            self.message_user(
                request,
                "Not evaluated: storing evaluations needs the 'django_sbert.add_evaluation' "
                "permission.",
                messages.ERROR,
            )
            return None
        for judgment_list in queryset:
            try:
                done = evaluation_run.evaluate(judgment_list)
            except (ValueError, LookupError, ServiceUnavailable) as exc:
                self.message_user(request, f"{judgment_list}: {exc}", messages.ERROR)
            else:
                figures = ", ".join(f"{e.mode} {e.metrics.get('ndcg@10', 0):.4f}" for e in done)
                self.message_user(request, f"{judgment_list}: nDCG@10 {figures}.", messages.SUCCESS)
        return None

    def get_urls(self) -> list:
        return [
            *page_urls(
                self,
                ("grade/", self.grade_view, "django_sbert_judgmentlist_grade"),
                ("import/", self.import_view, "django_sbert_judgmentlist_import"),
                ("<int:pk>/evaluate/", self.evaluate_view, "django_sbert_judgmentlist_evaluate"),
            ),
            *super().get_urls(),
        ]

    # --- grading (its work: grading.py) ---

    def grade_view(self, request: HttpRequest) -> HttpResponse:
        """A query's top rows by the serving version (and a candidate beside it), each with a
        grade 0-3 prefilled from the list; saving stores them in the list (made if new)."""
        require_permission(request, "django_sbert.change_judgmentlist")
        data = request.POST if request.method == "POST" else request.GET
        refs = grading.gradable_refs(self.admin_site, request)
        lists = list(JudgmentList.objects.select_related("content_type").order_by("name"))
        name = (data.get("name") or "").strip()[:200]
        chosen = next((j for j in lists if str(j.pk) == data.get("list", "")), None)
        chosen = chosen or next((j for j in lists if name and j.name == name), None)
        query = (data.get("q") or "").strip()[:500]
        ref, error = grading.graded_field(chosen, data.get("target"), refs)
        model_admin = (
            grading.model_admin_for(self.admin_site, request, ref) if ref is not None else None
        )
        candidates = grading.candidate_versions(ref.encoder_name) if ref is not None else []
        candidate = data.get("candidate", candidates[0] if candidates else "")
        if candidate not in candidates:
            candidate = ""
        if request.method == "POST" and ref is not None and query:
            if chosen is None:
                require_permission(request, "django_sbert.add_judgmentlist")
            if chosen is not None or name:
                rows = model_admin.get_queryset(request)
                return self._save_grades(request, chosen, name, ref, rows, query, candidate)
            error = "Name the new judgment list, or choose one."

        left: list[grading.GradedRow] = []
        right: list[grading.GradedRow] | None = None
        if ref is not None and query and error is None:
            rows = model_admin.get_queryset(request)
            try:
                left, right = grading.grading_sides(ref, rows, query, candidate)
            except compare.CompareError as exc:
                error = str(exc)
                left, right = grading.grading_sides(ref, rows, query, None)
            except ServiceUnavailable as exc:
                error = f"Search is unavailable: {exc}"
            grades = grading.list_grades(chosen, query) if chosen is not None else {}
            for item in [*left, *(right or [])]:
                item.grade = grades.get(item.pk)
                item.url = grading.row_url(self.admin_site, request, ref, item.row)
        serving = serving_version(ref.encoder_name) if ref is not None else None
        return render_page(
            self,
            request,
            "grade_results.html",
            "Grade search results",
            lists=lists,
            chosen=chosen,
            name=name,
            refs=[(grading.ref_key(r), str(r)) for r in refs],
            ref_key=grading.ref_key(ref) if ref is not None else "",
            query=query,
            candidates=candidates,
            candidate=candidate,
            serving_label=compare.version_label(serving) if serving is not None else "",
            candidate_label=compare.version_label(candidate) if candidate else "",
            left=left,
            right=right,
            grades=grading.GRADES,
            error=error,
            k=grading.K,
            pool=grading.POOL,
            may_add=request.user.has_perm("django_sbert.add_judgmentlist"),
        )

    def _save_grades(
        self,
        request: HttpRequest,
        judgment_list: JudgmentList | None,
        name: str,
        ref: FieldRef,
        rows: Any,
        query: str,
        candidate: str,
    ) -> HttpResponse:
        """Store the posted grades of ``query`` among ``rows`` in the list (None: a new list
        named ``name``, of ``ref``'s rows), then show the page again."""
        with transaction.atomic():  # a new list is kept only with its grades
            if judgment_list is None:
                judgment_list = JudgmentList.objects.create(
                    name=name,
                    content_type=ContentType.objects.get_for_model(ref.model),
                    field=ref.name,
                )
            saved = grading.save_grades(
                judgment_list, query, grading.posted_grades(request.POST), rows
            )
        self.message_user(
            request, f"Saved {saved} grade(s) of {query!r} in {judgment_list}.", messages.SUCCESS
        )
        target = urlencode({"list": judgment_list.pk, "q": query, "candidate": candidate})
        return HttpResponseRedirect(f"{reverse('admin:django_sbert_judgmentlist_grade')}?{target}")

    # --- import ---

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Upload judgments (CSV, JSON Lines, TREC qrels with its queries file) into a list, or
        make them from the eval pairs; every rejected line is shown, and nothing is saved (not
        even a new list) unless the import went through."""
        require_permission(request, "django_sbert.add_judgmentlist")
        require_permission(request, "django_sbert.change_judgmentlist")
        refs = grading.gradable_refs(self.admin_site, request)
        form = ImportJudgmentsForm(request.POST or None, request.FILES or None, refs=refs)
        report = None
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            ref = next(r for r in refs if grading.ref_key(r) == data["target"])
            try:
                with transaction.atomic():
                    judgment_list, report = self._import(ref, data)
                    if not report.ok and not data["skip_invalid"]:
                        transaction.set_rollback(True)
            except ValueError as exc:  # JudgmentsImportError: the whole file, or the list
                form.add_error("file" if data["source"] == "file" else None, str(exc))
                report = None
            if report is not None and (report.ok or data["skip_invalid"]):
                unmatched = len(report.unmatched)
                note = f" ({unmatched} eval pairs match no row)" if unmatched else ""
                self.message_user(
                    request,
                    f"{judgment_list}: {report.judgments} judgments of {report.queries} new "
                    f"queries imported{note}.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse("admin:django_sbert_judgmentlist_change", args=[judgment_list.pk])
                )
        return render_page(
            self, request, "import_judgments.html", "Import judgments", form=form, report=report
        )

    @staticmethod
    def _import(ref: FieldRef, data: dict[str, Any]) -> tuple[JudgmentList, Any]:
        """The list named (made if new, for ``ref``'s model) and the import's report."""
        name = data["name"].strip()
        content_type = ContentType.objects.get_for_model(ref.model)
        judgment_list, _ = JudgmentList.objects.get_or_create(
            name=name, defaults={"content_type": content_type, "field": ref.name}
        )
        if (judgment_list.content_type_id, judgment_list.field) != (content_type.pk, ref.name):
            raise JudgmentsImportError(
                f"Judgment list {name!r} grades {judgment_list.content_type}."
                f"{judgment_list.field}: choose those rows, or another name."
            )
        if data["source"] == "eval_pairs":
            return judgment_list, judgment_io.from_eval_pairs(judgment_list)
        upload = data["file"]
        kind = data["format"] or judgment_io.detect_format(upload.name)
        doc_ids = (data.get("id_field") or "").strip() or None
        if kind == "trec":
            if not data.get("queries"):
                raise JudgmentsImportError(
                    "A TREC qrels file needs its queries file: add it below."
                )
            doc_ids = doc_ids or ref.model._meta.pk.name
        report = judgment_io.import_file(
            upload,
            judgment_list,
            kind,
            queries=data.get("queries"),
            doc_ids=doc_ids,
            skip_invalid=data["skip_invalid"],
        )
        return judgment_list, report

    # --- evaluate now ---

    def evaluate_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Measure the list now with a version (serving by default) in the chosen modes."""
        require_permission(request, "django_sbert.view_judgmentlist")
        judgment_list = get_object_or_404(JudgmentList, pk=pk)
        try:
            encoder_name = grading.ref_of_list(judgment_list).encoder_name
        except LookupError:
            encoder_name = "default"
        form = EvaluateForm(request.POST or None, encoder_name=encoder_name)
        results: list[Evaluation] = []
        error = None
        if request.method == "POST":
            require_permission(request, "django_sbert.change_judgmentlist")
            if form.is_valid():
                data = form.cleaned_data
                if data["store"]:
                    require_permission(request, "django_sbert.add_evaluation")
                try:
                    results = evaluation_run.evaluate(
                        judgment_list,
                        version=data["version"] or None,
                        modes=data["modes"],
                        store=data["store"],
                        trigger="manual",
                    )
                except (ValueError, LookupError, ServiceUnavailable) as exc:
                    error = str(exc)
        return render_page(
            self,
            request,
            "evaluate_judgments.html",
            f"Evaluate {judgment_list}",
            judgment_list=judgment_list,
            form=form,
            results=evaluations_table(results) if results else "",
            error=error,
        )
