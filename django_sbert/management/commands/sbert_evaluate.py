"""``manage.py sbert_evaluate``: how good search is on a judgment list, per search mode.

::

    $ manage.py sbert_evaluate scifact-claims
    judgment list scifact-claims: blog.Article.embedding, version all-MiniLM-L6-v2:1a2b...
    mode     ndcg@10  recall@10  recall@100  mrr@10  no_relevant@10  queries  min_sim  seconds
    vector    0.6451     0.7833      0.9300  0.6120          0.2100      300   0.4100      8.2
    keyword   0.6510     ...

    $ manage.py sbert_evaluate scifact-claims --encoder-version base --mode vector --json
    $ manage.py sbert_evaluate scifact-claims --fail-under ndcg@10=0.62 --fail-under recall@10=0.7

Under the table, for the hybrid mode: the settings' fusion and the version's tuned one side by
side on the list, and a fusion tuned on part of the list's queries against the one in use on
the others; ``--keep-fusion`` keeps it on the version when it won there (docs/hybrid.md).
The options are in docs/commands.md; ``--fail-under METRIC=VALUE`` exits with status 1 when
a mode scores under it: a deploy pipeline's check. How a version that does not serve is
measured: ``django_sbert.evaluation.run``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.evaluation.run import MODES, EvaluationError, evaluate
from django_sbert.models import JudgmentList

COLUMNS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "no_relevant@10")


def parse_threshold(value: str) -> tuple[str, float]:
    """``"ndcg@10=0.62"`` -> ``("ndcg@10", 0.62)``; metric names are case-insensitive."""
    name, sep, number = value.partition("=")
    try:
        if not sep:
            raise ValueError
        return name.strip().lower(), float(number)
    except ValueError:
        raise CommandError(
            f"--fail-under takes METRIC=VALUE, e.g. ndcg@10=0.62, not {value!r}."
        ) from None


class Command(BaseCommand):
    help = (
        "Measure search on a judgment list: nDCG@10, Recall@10/@100, MRR@10 and the share of "
        "queries with no relevant row in the top 10, per search mode."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("list", help="The judgment list's name.")
        parser.add_argument(
            "--encoder-version",
            dest="version",
            default=None,
            help="serving (default), base, or an encoder version string or id.",
        )
        parser.add_argument(
            "--mode",
            action="append",
            choices=MODES,
            dest="modes",
            help="A search mode to measure (repeat for several); default: every mode the "
            "field can do.",
        )
        parser.add_argument("--json", action="store_true", help="Print JSON, not a table.")
        parser.add_argument(
            "--fail-under",
            action="append",
            default=[],
            metavar="METRIC=VALUE",
            help="Exit with status 1 when a measured mode scores below VALUE on METRIC "
            "(e.g. ndcg@10=0.62); repeat for several.",
        )
        parser.add_argument("--no-store", action="store_true", help="Do not store the evaluations.")
        parser.add_argument(
            "--keep-fusion",
            action="store_true",
            help="Keep the fusion tuned on the list on the version, where it ranked the list's "
            "held-out queries better than the fusion in use (hybrid mode).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        thresholds = dict(parse_threshold(value) for value in options["fail_under"])
        try:
            judgment_list = JudgmentList.objects.get(name=options["list"])
        except JudgmentList.DoesNotExist:
            known = ", ".join(JudgmentList.objects.values_list("name", flat=True)[:10])
            raise CommandError(
                f"No judgment list named {options['list']!r}"
                + (f"; there are: {known}." if known else "; import or grade one first.")
            ) from None
        try:
            evaluations = evaluate(
                judgment_list,
                version=options["version"],
                modes=options["modes"],
                store=not options["no_store"],
                trigger="manual",
                keep_fusion=options["keep_fusion"],
            )
        except EvaluationError as exc:
            raise CommandError(str(exc)) from exc
        for name in thresholds:
            if not any(name in e.metrics for e in evaluations):
                raise CommandError(
                    f"--fail-under names {name!r}, which is not measured; use one of "
                    f"{', '.join(COLUMNS)}."
                )
        if options["json"]:
            self.stdout.write(json.dumps(as_json(judgment_list, evaluations), indent=2))
        else:
            self.stdout.write(table(judgment_list, evaluations))
        failed = [
            f"{e.mode} {name} {e.metrics[name]:.4f} < {limit:g}"
            for e in evaluations
            for name, limit in thresholds.items()
            if name in e.metrics and float(e.metrics[name]) < limit
        ]
        if failed:
            raise CommandError("Below the --fail-under thresholds: " + "; ".join(failed))


def as_json(judgment_list: JudgmentList, evaluations: list[Any]) -> dict[str, Any]:
    return {
        "list": judgment_list.name,
        "field": f"{judgment_list.content_type.model_class()._meta.label}.{judgment_list.field}",
        "version": evaluations[0].version if evaluations else None,
        "modes": {e.mode: {**e.metrics, "seconds": e.seconds, "id": e.pk} for e in evaluations},
    }


def table(judgment_list: JudgmentList, evaluations: list[Any]) -> str:
    """Modes x metrics, with the threshold (``min_sim``) of the vector modes and each mode's
    seconds."""
    version = evaluations[0].version if evaluations else "-"
    head = ("mode", *COLUMNS, "queries", "min_sim", "seconds")
    rows = [head]
    for e in evaluations:
        threshold = (e.metrics.get("threshold") or {}).get("min_similarity")
        rows.append(
            (
                e.mode,
                *(_figure(e.metrics.get(name)) for name in COLUMNS),
                str(e.metrics.get("queries", "-")),
                _figure(threshold),
                f"{e.seconds:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    label = judgment_list.content_type.model_class()._meta.label
    name = judgment_list.name
    lines = [f"judgment list {name}: {label}.{judgment_list.field}, version {version}"]
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
    for e in evaluations:
        if e.mode == "hybrid" and e.metrics.get("fusion"):
            lines += fusion_lines(e.metrics["fusion"])
    return "\n".join(lines)


def fusion_lines(report: dict[str, Any]) -> list[str]:
    """The hybrid mode's fusions side by side (``evaluation.run.fusion_report``)."""
    settings, tuned, tried = report["settings"], report.get("tuned"), report["list"]
    serving = report["serving"]
    lines = ["hybrid fusion, nDCG@10 on the list:"]
    mark = " (serves)" if serving == "settings" else ""
    lines.append(
        f"  settings' {describe(settings['fusion'])}: {_figure(settings['ndcg@10'])}{mark}"
    )
    if tuned:
        lines.append(
            f"  version's tuned {describe(tuned['fusion'])}: {_figure(tuned['ndcg@10'])} (serves)"
        )
    held = tried["heldout_queries"]
    head = f"  tuned on {tried['tuned_on']} of the list's queries, {describe(tried['fusion'])}: "
    if tried["heldout_tuned_ndcg@10"] is None:
        lines.append(head + f"{held} held-out queries, too few to judge it")
    else:
        verdict = "wins" if tried["wins"] else "does not win"
        if tried["wins"]:
            verdict += ", kept on the version" if tried["kept"] else ", not kept"
        lines.append(
            head + f"on the {held} others {_figure(tried['heldout_tuned_ndcg@10'])} against "
            f"{_figure(tried['heldout_current_ndcg@10'])} for the fusion in use: {verdict}"
        )
    return lines


def describe(fusion: dict[str, Any]) -> str:
    """``{"fusion": "rrf", "rrf_k": 1.0, ...}`` in words: "rrf k 1, weights 1 / 1"."""
    weights = f"weights {fusion['vector_weight']:g} / {fusion['keyword_weight']:g}"
    if fusion["fusion"] == "rrf":
        return f"(rrf k {fusion['rrf_k']:g}, {weights})"
    return f"({fusion['fusion']}, {weights})"


def _figure(value: Any) -> str:
    return "-" if value is None else f"{float(value):.4f}"
