"""HTML pieces of the admin: a progress bar, the loss and eval curves, a metrics table, and
search quality over time (each mode's metrics per evaluation, promotions marked).

Server-side HTML and inline SVG, no JavaScript library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils.html import format_html, format_html_join


def progress_bar(share: float, label: str = "") -> str:
    """A small HTML progress bar (share in [0, 1])."""
    percent = max(0.0, min(1.0, share)) * 100
    return format_html(
        '<div class="sbert-progress" style="display:inline-block;width:160px;height:10px;'
        'background:#ddd;border-radius:3px;vertical-align:middle"><div class="sbert-bar" '
        'style="width:{}%;height:10px;background:#417690;border-radius:3px"></div></div> '
        '<span class="sbert-progress-label">{}</span>',
        f"{percent:.1f}",
        label or f"{percent:.0f}%",
    )


BLUE, RED = "#417690", "#ba2121"  # the admin's link and error colours
PAD = 30  # around a curve: room for its labels
WHEN = "%Y-%m-%d %H:%M"


def _scale(lo: float, hi: float, start: float, end: float) -> Callable[[float], float]:
    """Maps [lo, hi] onto [start, end] (a flat range onto ``start``)."""
    span = (hi - lo) or 1.0
    return lambda value: start + (value - lo) / span * (end - start)


def _svg(css_class: str, label: str, size: tuple[int, int], *parts: str) -> str:
    """An inline SVG chart of ``parts`` in a light frame (no JavaScript library)."""
    return format_html(
        '<svg class="{}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        'aria-label="{}"><rect width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>{}</svg>',
        css_class,
        label,
        format_html_join("", "{}", ((part,) for part in parts)),
        w=size[0],
        h=size[1],
    )


def _text(x: float, y: float, text: str, anchor: str = "start") -> str:
    return format_html(
        '<text x="{}" y="{}" font-size="10" text-anchor="{}">{}</text>',
        f"{x:.1f}",
        f"{y:.1f}",
        anchor,
        text,
    )


def _polyline(
    xy: Iterable[tuple[float, float]], colour: str = BLUE, dash: str = "", series: str = ""
) -> str:
    """A line through ``xy``; ``series`` names it (``data-series``) on a chart of several."""
    named = format_html(' class="sbert-series" data-series="{}"', series) if series else ""
    return format_html(
        '<polyline{} fill="none" stroke="{}" stroke-width="1.5" stroke-dasharray="{}" '
        'points="{}"/>',
        named,
        colour,
        dash,
        " ".join(f"{x:.1f},{y:.1f}" for x, y in xy),
    )


def _dots(dots: Iterable[tuple[float, float, float, str, str]]) -> str:
    """A circle per (x, y, radius, colour, tooltip)."""
    return format_html_join(
        "",
        '<circle cx="{}" cy="{}" r="{}" fill="{}"><title>{}</title></circle>',
        ((f"{x:.1f}", f"{y:.1f}", r, colour, tip) for x, y, r, colour, tip in dots),
    )


def _curve(
    css_class: str,
    label: str,
    points: list[tuple[float, float]],
    size: tuple[int, int],
    note: str,
    *,
    digits: int,
    note_top: bool = False,
    dots: bool = False,
    best: float | None = None,
) -> str:
    """(step, value) points as a line filling the frame, the highest and lowest values on the
    left and ``note`` bottom right (``note_top``: top right); ``dots``: a dot per point, the
    ``best`` step's red."""
    width, height = size
    lo, hi = min(v for _, v in points), max(v for _, v in points)
    x = _scale(points[0][0], points[-1][0], PAD, width - PAD)
    y = _scale(lo, hi, height - PAD, PAD)
    xy = [(x(s), y(v)) for s, v in points]
    marked = [
        (*at, 4 if s == best else 2.5, RED if s == best else BLUE, f"step {s}: {v:.4f}")
        for at, (s, v) in zip(xy, points, strict=True)
    ]
    return _svg(
        css_class,
        label,
        size,
        _polyline(xy),
        _dots(marked) if dots else "",
        _text(4, PAD, f"{hi:.{digits}f}"),
        _text(4, height - PAD, f"{lo:.{digits}f}"),
        _text(width - 4, 14 if note_top else height - 6, note, "end"),
    )


def loss_curve_svg(history: list[list[float]], width: int = 560, height: int = 180) -> str:
    """The training loss per step as an inline SVG line."""
    points = [(float(s), float(v)) for s, v in history or []]
    if len(points) < 2:
        return "-"
    if len(points) > 400:  # average into 400 buckets: one point per ~1.4 px
        size = len(points) / 400
        buckets = [points[int(i * size) : int((i + 1) * size)] for i in range(400)]
        points = [(b[-1][0], sum(v for _, v in b) / len(b)) for b in buckets if b]
    label, note = "training loss per step", f"step {points[-1][0]:.0f}"
    return _curve("sbert-loss-curve", label, points, (width, height), note, digits=3)


def figure(value: Any) -> str:
    """A measured figure as the tables show it: four decimals, "-" when not measured."""
    return "-" if value is None else f"{float(value):.4f}"


def html_table(
    head: Sequence[str], rows: Iterable[Sequence[Any]], css_class: str = "", titled: bool = False
) -> str:
    """A table: a header row, then a row per sequence of cells (``titled``: its first cell is
    the row's header)."""

    def cells(tag: str, values: Iterable[Any]) -> str:
        return format_html_join("", f"<{tag}>{{}}</{tag}>", ((value,) for value in values))

    body = format_html_join(
        "",
        "<tr>{}{}</tr>",
        (
            (cells("th", row[:1]), cells("td", row[1:])) if titled else ("", cells("td", row))
            for row in rows
        ),
    )
    named = format_html(' class="{}"', css_class) if css_class else ""
    return format_html("<table{}><tr>{}</tr>{}</table>", named, cells("th", head), body)


METRIC_ROWS = (  # metrics_table's rows, where measured
    "ndcg@10",
    "recall@10",
    "sts_spearman",
    "eval_pairs",
    "eval_distractors",
    "general_sts_spearman",
)


def metrics_table(*columns: tuple[str, dict[str, float]]) -> str:
    """Metrics side by side: one column per (title, metrics)."""
    names = [n for n in METRIC_ROWS if any(n in m for _, m in columns)]
    if not names:
        return "-"

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    rows = ([name, *(cell(m.get(name)) for _, m in columns)] for name in names)
    return html_table(["", *(title for title, _ in columns)], rows, titled=True)


SEARCH_SIDES = (  # (column title, prefix of the metric names), finetuning/hybrid.py
    ("vector", ""),
    ("keyword", "keyword_"),
    ("hybrid (settings' fusion)", "hybrid_"),
    ("hybrid (tuned fusion)", "tuned_"),
)


def search_table(*measured: tuple[str, dict[str, Any]]) -> str:
    """Vector, keyword and hybrid search side by side: a row per (model, metric), a column per
    side, then for each model the fusion tuned on part of its queries, how it and the
    settings' fusion ranked the others, and which one serves; "-" when none was measured."""
    models = [(title, m or {}) for title, m in measured if "keyword_ndcg@10" in (m or {})]
    if not models:
        return "-"
    rows = (
        [f"{title}: {metric}", *(figure(m.get(prefix + metric)) for _, prefix in SEARCH_SIDES)]
        for title, m in models
        for metric in ("ndcg@10", "recall@10")
    )
    verdicts = [(title, fusion_verdict(m)) for title, m in models]
    return format_html(
        "{}<p>{}</p>",
        html_table(["", *(side for side, _ in SEARCH_SIDES)], rows, titled=True),
        format_html_join("; ", "{}: {}", [(t, v) for t, v in verdicts if v]),
    )


def fusion_verdict(metrics: dict[str, Any]) -> str:
    """The tuned fusion of a version's metrics, the held-out figures that judged it, and which
    fusion serves, in words; "" when none was tuned."""
    if "candidate_fusion_rrf_k" in metrics:
        tuned = describe_fusion(metrics, "candidate_fusion_")
    elif "fusion_rrf_k" in metrics:  # stored before the held-out check: it serves
        return f"tuned fusion {describe_fusion(metrics)} (serves)"
    else:
        return ""
    held = int(metrics.get("heldout_queries") or 0)
    serves = "the tuned fusion serves" if metrics.get("fusion_used") else "the settings' serve"
    if "heldout_tuned_ndcg@10" not in metrics:
        judged = f"{held} held-out queries, too few to judge it"
    else:
        judged = (
            f"nDCG@10 on {held} queries it was not tuned on: settings' "
            f"{metrics['heldout_hybrid_ndcg@10']:.4f}, tuned {metrics['heldout_tuned_ndcg@10']:.4f}"
        )
    return f"tuned fusion {tuned}; {judged}; {serves}"


def describe_fusion(metrics: dict[str, Any], prefix: str = "fusion_") -> str:
    """The fusion stored in a version's metrics under ``prefix``, in words: "linear, vector
    weight 0.7, keyword weight 0.3" or "rrf, rrf_k 60, vector weight 1, keyword weight 0.25"."""
    method = metrics.get(f"{prefix}method", "rrf")  # stored before linear fusion: rrf
    weights = (
        f"vector weight {metrics[f'{prefix}vector_weight']:g}, "
        f"keyword weight {metrics[f'{prefix}keyword_weight']:g}"
    )
    if method == "rrf":
        return f"rrf, rrf_k {metrics[f'{prefix}rrf_k']:g}, {weights}"
    return f"{method}, {weights}"


def eval_curve_svg(evaluations: dict[str, Any], width: int = 360, height: int = 180) -> str:
    """The metric early stopping compared at each evaluation (the eval split's, or
    ``pseudo_*`` on a content run's held-back pseudo-pairs), the kept step marked."""
    history = [(int(s), float(v)) for s, v in (evaluations or {}).get("history", [])]
    if not history:
        return ""
    metric = evaluations.get("metric") or "metric"
    return _curve(
        "sbert-eval-curve",
        f"{metric} per evaluation",
        history,
        (width, height),
        metric,
        digits=4,
        note_top=True,
        dots=True,
        best=evaluations.get("best_step"),
    )


def kept_step_text(evaluations: dict[str, Any]) -> str:
    """``kept step 120 of 180 (ndcg@10 0.7012); stopped early`` for the run page."""
    if not evaluations or evaluations.get("best_step") is None:
        return ""
    text = (
        f"kept step {evaluations['best_step']} ({evaluations.get('metric')} "
        f"{float(evaluations['best_metric']):.4f})"
    )
    if evaluations.get("total_steps"):
        text += f"; trained {evaluations['steps']} of {evaluations['total_steps']} steps"
        if evaluations.get("stopped_early"):
            text += ", stopped early"
    return text


def training_curves(loss_history: list[list[float]], evaluations: dict[str, Any]) -> str:
    """The loss curve and, beside it, the eval metric per evaluation and the kept step."""
    loss = loss_curve_svg(loss_history)
    evals = eval_curve_svg(evaluations)
    if not evals:
        return loss
    return format_html(
        '<div class="sbert-curves" style="display:flex;gap:12px;flex-wrap:wrap">'
        "<div>{}</div><div>{}</div></div>"
        '<p class="sbert-kept-step">{}</p>',
        loss,
        evals,
        kept_step_text(evaluations),
    )


# One colour per search mode in the quality chart.
MODE_COLOURS = {"vector": BLUE, "keyword": "#b8860b", "hybrid": "#1a7f37", "passages": "#8a3ffc"}


def time_chart_svg(
    series: dict[tuple[str, str], list[tuple[datetime, float, str]]],
    marks: list[tuple[datetime, str]],
    width: int = 640,
    height: int = 220,
) -> str:
    """Lines of values in [0, 1] over time, one per (name, metric), with a vertical dashed line
    per mark (a promotion); every metric but the first is drawn dashed.

    ``series`` maps (name, metric) to (time, value, note) points; a point's tooltip says its
    note. Marks after the last point, or over a day before the first, are left out.
    """
    points = [p for line in series.values() for p in line]
    if not points:
        return "-"
    pad, top, bottom = 36, 16, height - 36
    first, last = min(t for t, _, _ in points), max(t for t, _, _ in points)
    # A promotion up to a day before the first point is shown (its evaluation follows it).
    marks = [(t, label) for t, label in marks if first - timedelta(days=1) <= t <= last]
    first = min([first, *(t for t, _ in marks)])
    wide = 0.0 if first < last else 1.0  # one moment: in the middle
    x = _scale(first.timestamp() - wide, last.timestamp() + wide, pad, width - pad)
    y = _scale(0.0, 1.0, bottom, top)
    solid = min(series)[1]  # the first metric (by name) is drawn solid, the others dashed
    parts, legend = [], []
    for (name, metric), line in sorted(series.items()):
        colour, dash = MODE_COLOURS.get(name, "#666"), "" if metric == solid else "4 3"
        xy = [(x(t.timestamp()), y(max(0.0, min(1.0, v)))) for t, v, _ in line]
        tips = [f"{name} {metric} {t:{WHEN}}: {v:.4f} ({note})" for t, v, note in line]
        parts.append(_polyline(xy, colour, dash, f"{name} {metric}"))
        parts.append(_dots((*at, 2.5, colour, tip) for at, tip in zip(xy, tips, strict=True)))
        legend.append(("dashed" if dash else "solid", colour, f"{name} {metric}"))
    rules = format_html_join(
        "",
        '<g class="sbert-promotion"><line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="{3}" '
        'stroke-dasharray="2 2"/><text x="{0}" y="{4}" font-size="9" text-anchor="middle" '
        'fill="{3}">{5}</text><title>promoted {5} on {6}</title></g>',
        (
            (f"{x(t.timestamp()):.1f}", top, bottom, RED, top - 4, version, f"{t:{WHEN}}")
            for t, version in marks
        ),
    )
    svg = _svg(
        "sbert-quality-chart",
        "search quality over time",
        (width, height),
        format_html_join(
            "",
            '<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="{3}"/>',
            ((pad, y_, width - pad, colour) for y_, colour in ((top, "#e0e0e0"), (bottom, "#ccc"))),
        ),
        rules,
        *parts,
        _text(4, top + 4, "1.0"),
        _text(4, bottom + 4, "0.0"),
        _text(pad, height - 8, f"{first:{WHEN}}"),
        _text(width - pad, height - 8, f"{last:{WHEN}}", "end"),
    )
    keys = format_html_join(
        " ",
        '<span style="white-space:nowrap"><span style="display:inline-block;width:18px;'
        'border-top:2px {} {};vertical-align:middle"></span> {}</span>',
        legend,
    )
    note = " Dashed red lines: promotions." if marks else ""
    return format_html('<div>{}</div><p class="sbert-chart-legend">{}{}</p>', svg, keys, note)
