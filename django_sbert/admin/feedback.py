"""Admin for the search log: the searches (read only) and "What people look for".

The analytics page (``searchlog/analytics/``, staff with ``view_searchlog``): top queries,
queries with no result, queries with results and no click, click-through rate by position and
the mean reciprocal rank of the first click per day and per encoder version (a chart drawn by
the vendored Chart.js, no CDN), over a date range and optionally one model. Its button "Make
training pairs from these clicks" (``add_trainingpair``) runs ``feedback.pairs`` over the
range shown. It also shows the loop's latest runs from behaviour and what became of their
candidates (``feedback.loop.loop_runs``).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from ..conf import sbert_settings
from ..conf.declaration import PAIR_OPTION
from ..feedback import analytics, loop
from ..feedback.pairs import behaviour_pairs
from ..models import SearchLog
from .display import progress_bar
from .mixins import page_urls, render_page, require_permission
from .searchlog import SearchLogListAdmin

__all__ = ["SearchLogAdmin"]

DEFAULT_DAYS = 30
MOST_DAYS = 3660  # a range longer than ten years is a typo


class AnalyticsFilter(forms.Form):
    """The page's date range (both days included) and model."""

    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    model = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [("", "all models")] + [(m, m) for m in analytics.models_logged()]
        self.fields["model"].choices = choices

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        today = timezone.localdate()
        until = data.get("until") or today
        since = data.get("since") or until - timedelta(days=DEFAULT_DAYS - 1)
        if since > until:
            raise forms.ValidationError("The first day comes after the last day.")
        if (until - since).days > MOST_DAYS:
            raise forms.ValidationError(f"Choose at most {MOST_DAYS} days.")
        data["since"], data["until"] = since, until
        return data

    def window(self) -> analytics.Window:
        data = self.cleaned_data
        return analytics.Window.between(data["since"], data["until"], data.get("model") or "")


class PairsForm(forms.Form):
    """Options of "Make training pairs from these clicks": ``PAIR_OPTIONS`` but the eval
    share (initial values: ``SBERT["FEEDBACK"]``)."""

    @staticmethod
    def initial_values() -> dict[str, Any]:
        return {name: sbert_settings.FEEDBACK[name.upper()] for name in FORM_PAIR_OPTIONS}


FORM_PAIR_OPTIONS = ("min_clients", "min_relevance", "negatives")
PairsForm.base_fields.update({name: PAIR_OPTION[name].form_field() for name in FORM_PAIR_OPTIONS})


@admin.register(SearchLog)
class SearchLogAdmin(SearchLogListAdmin):
    """Logged searches, read only, their UBI download, and the analytics page."""

    list_display = ("created_at", "query", "mode", "model_label", "result_count", "version")
    list_filter = ("mode", "model_label", "encoder_name", "version")
    search_fields = ("normalized",)
    date_hierarchy = "created_at"
    change_list_template = "django_sbert/admin/feedback/searchlog_change_list.html"
    readonly_fields = (
        "query",
        "normalized",
        "mode",
        "model_label",
        "field",
        "encoder_name",
        "version",
        "results",
        "result_count",
        "client",
        "latency_ms",
        "created_at",
    )
    fields = readonly_fields

    def get_urls(self) -> list:
        analytics_page = ("analytics/", self.analytics_view, "django_sbert_searchlog_analytics")
        return [*page_urls(self, analytics_page), *super().get_urls()]

    def analytics_view(self, request: HttpRequest) -> HttpResponse:
        """What people look for, over the chosen days; POST makes pairs from their clicks."""
        require_permission(request, "django_sbert.view_searchlog")
        form = AnalyticsFilter(request.GET or None)
        if not form.is_bound:
            form = AnalyticsFilter({})
        window = form.window() if form.is_valid() else analytics.Window.days(DEFAULT_DAYS)
        if request.method == "POST":
            return self.make_pairs(request, window)
        by_day = analytics.mrr_by_day(window)
        ctr = analytics.ctr_by_position(window)
        return render_page(
            self,
            request,
            "feedback/analytics.html",
            "What people look for",
            form=form,
            pairs_form=PairsForm(initial=PairsForm.initial_values()),
            window=window,
            summary=analytics.summary(window),
            top=analytics.top_queries(window),
            zero=analytics.zero_results(window),
            abandoned=analytics.abandoned(window),
            ctr=ctr,
            versions=analytics.mrr_by_version(window),
            chart_data=_chart_data(window, by_day, ctr),
            loop_runs=[_loop_row(row) for row in loop.loop_runs()],
            auto_promote=sbert_settings.FEEDBACK["AUTO_PROMOTE"],
            may_make_pairs=request.user.has_perm("django_sbert.add_trainingpair"),
        )

    def make_pairs(self, request: HttpRequest, window: analytics.Window) -> HttpResponse:
        """The page's action: pairs from the clicks of the days shown (``feedback.pairs``)."""
        require_permission(request, "django_sbert.add_trainingpair")
        options = PairsForm(request.POST)
        url = f"{reverse('admin:django_sbert_searchlog_analytics')}?{request.GET.urlencode()}"
        if not options.is_valid():
            self.message_user(request, f"Not made: {options.errors.as_text()}", messages.ERROR)
            return HttpResponseRedirect(url)
        given = {name: options.cleaned_data[name] for name in FORM_PAIR_OPTIONS}
        chosen = {name: value for name, value in given.items() if value not in (None, "")}
        report = behaviour_pairs(
            window.since, window.until, model_label=window.model_label or None, **chosen
        )
        level = messages.SUCCESS if report.created else messages.WARNING
        self.message_user(request, f"Training pairs from clicks: {report.describe()}.", level)
        return HttpResponseRedirect(url)


def _chart_data(
    window: analytics.Window, by_day: list[dict[str, Any]], ctr: list[dict[str, Any]]
) -> dict[str, Any]:
    """What the page's two charts draw: MRR per day, one line per encoder version (a gap on
    days it did not serve), and click-through by position."""
    days: list[date] = []
    day = window.first_day
    while day <= window.last_day:
        days.append(day)
        day += timedelta(days=1)
    series: dict[str, dict[str, float]] = {}
    for row in by_day:
        label = f"{row['encoder_name']}: {row['version'] or 'unversioned'}"
        series.setdefault(label, {})[row["day"].isoformat()] = round(row["mrr"], 4)
    return {
        "days": [d.isoformat() for d in days],
        "mrr": [
            {"label": label, "data": [values.get(d.isoformat()) for d in days]}
            for label, values in series.items()
        ],
        "positions": [row["position"] for row in ctr],
        "ctr": [round(row["ctr"], 4) for row in ctr],
    }


def _loop_row(row: loop.LoopRun) -> dict[str, Any]:
    run, candidate = row.run, row.candidate
    links = {}
    if candidate is not None:
        version = "admin:django_sbert_encoderversion"
        links = {
            "candidate_url": reverse(f"{version}_change", args=[candidate.pk]),
            "compare_url": reverse(f"{version}_compare", args=[candidate.pk]),
        }
    return {
        "run": run,
        "url": reverse("admin:django_sbert_trainingrun_change", args=[run.pk]),
        "progress": progress_bar(run.progress, run.status),
        "candidate": candidate,
        "decision": row.decision,
        "flags": row.flags,
        **links,
    }
