"""HTML pieces of the admin: a progress bar, the loss and eval curves, a metrics table, and
search quality over time (each mode's metrics per evaluation, promotions marked).

Server-side HTML and inline SVG, no JavaScript library.
"""

from __future__ import annotations

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


def loss_curve_svg(history: list[list[float]], width: int = 560, height: int = 180) -> str:
    """The training loss per step as an inline SVG line (no JavaScript library)."""
    points = [(float(s), float(v)) for s, v in history or []]
    if len(points) < 2:
        return "-"
    if len(points) > 400:  # average into 400 buckets: one point per ~1.4 px
        size = len(points) / 400
        buckets = [points[int(i * size) : int((i + 1) * size)] for i in range(400)]
        points = [(b[-1][0], sum(v for _, v in b) / len(b)) for b in buckets if b]
    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    lo, hi = min(losses), max(losses)
    span = (hi - lo) or 1.0
    pad = 30
    xy = " ".join(
        f"{pad + (s - steps[0]) / ((steps[-1] - steps[0]) or 1) * (width - 2 * pad):.1f},"
        f"{height - pad - (v - lo) / span * (height - 2 * pad):.1f}"
        for s, v in points
    )
    return format_html(
        '<svg class="sbert-loss-curve" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'role="img" aria-label="training loss per step">'
        '<rect width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>'
        '<polyline fill="none" stroke="#417690" stroke-width="1.5" points="{xy}"/>'
        '<text x="4" y="{top}" font-size="10">{hi}</text>'
        '<text x="4" y="{bottom}" font-size="10">{lo}</text>'
        '<text x="{right}" y="{h2}" font-size="10" text-anchor="end">step {last}</text>'
        "</svg>",
        w=width,
        h=height,
        xy=xy,
        top=pad,
        bottom=height - pad,
        # Numbers formatted here: format_html escapes its arguments into strings first.
        hi=f"{hi:.3f}",
        lo=f"{lo:.3f}",
        right=width - 4,
        h2=height - 6,
        last=f"{steps[-1]:.0f}",
    )


def metrics_table(*columns: tuple[str, dict[str, float]]) -> str:
    """Metrics side by side: one column per (title, metrics)."""
    known = (
        "ndcg@10",
        "recall@10",
        "sts_spearman",
        "eval_pairs",
        "eval_distractors",
        "general_sts_spearman",
    )
    names = [n for n in known if any(n in m for _, m in columns)]
    if not names:
        return "-"

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    head = format_html_join("", "<th>{}</th>", ((title,) for title, _ in columns))
    body = format_html_join(
        "",
        "<tr><th>{}</th>{}</tr>",
        (
            (
                name,
                format_html_join("", "<td>{}</td>", ((cell(m.get(name)),) for _, m in columns)),
            )
            for name in names
        ),
    )
    return format_html("<table><tr><th></th>{}</tr>{}</table>", head, body)


SEARCH_SIDES = (  # (column title, prefix of the metric names), finetuning/hybrid.py
    ("vector", ""),
    ("keyword", "keyword_"),
    ("hybrid (settings' fusion)", "hybrid_"),
    ("hybrid (chosen fusion)", "tuned_"),
)


def search_table(*measured: tuple[str, dict[str, Any]]) -> str:
    """Vector, keyword and hybrid search side by side: a row per (model, metric), a column per
    side, then the fusion chosen for each model; "-" when none was measured."""
    models = [(title, m or {}) for title, m in measured if "keyword_ndcg@10" in (m or {})]
    if not models:
        return "-"

    def cell(value: Any) -> str:
        return "-" if value is None else f"{float(value):.4f}"

    rows = [
        (
            f"{title}: {metric}",
            format_html_join(
                "", "<td>{}</td>", ((cell(m.get(prefix + metric)),) for _, prefix in SEARCH_SIDES)
            ),
        )
        for title, m in models
        for metric in ("ndcg@10", "recall@10")
    ]
    fusion = [(title, describe_fusion(m)) for title, m in models if "fusion_rrf_k" in m]
    return format_html(
        "<table><tr><th></th>{}</tr>{}</table><p>{}</p>",
        format_html_join("", "<th>{}</th>", ((side,) for side, _ in SEARCH_SIDES)),
        format_html_join("", "<tr><th>{}</th>{}</tr>", rows),
        format_html_join("; ", "chosen fusion ({}): {}", fusion),
    )


def describe_fusion(metrics: dict[str, Any]) -> str:
    """The fusion stored in a version's metrics, in words: "linear, vector weight 0.7, keyword
    weight 0.3" or "rrf, rrf_k 60, vector weight 1, keyword weight 0.25"."""
    method = metrics.get("fusion_method", "rrf")  # versions stored before linear fusion: rrf
    weights = (
        f"vector weight {metrics['fusion_vector_weight']:g}, "
        f"keyword weight {metrics['fusion_keyword_weight']:g}"
    )
    if method == "rrf":
        return f"rrf, rrf_k {metrics['fusion_rrf_k']:g}, {weights}"
    return f"{method}, {weights}"


def eval_curve_svg(evaluations: dict[str, Any], width: int = 360, height: int = 180) -> str:
    """The metric early stopping compared at each evaluation (the eval split's, or
    ``pseudo_*`` on a content run's held-back pseudo-pairs), the kept step marked."""
    history = [(int(s), float(v)) for s, v in (evaluations or {}).get("history", [])]
    if not history:
        return ""
    metric = evaluations.get("metric") or "metric"
    best = evaluations.get("best_step")
    values = [v for _, v in history]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    first, last = history[0][0], history[-1][0]
    pad = 30

    def x(step: int) -> float:
        return pad + (step - first) / ((last - first) or 1) * (width - 2 * pad)

    def y(value: float) -> float:
        return height - pad - (value - lo) / span * (height - 2 * pad)

    xy = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in history)
    dots = format_html_join(
        "",
        '<circle cx="{}" cy="{}" r="{}" fill="{}"><title>step {}: {}</title></circle>',
        (
            (
                f"{x(s):.1f}",
                f"{y(v):.1f}",
                4 if s == best else 2.5,
                "#ba2121" if s == best else "#417690",
                s,
                f"{v:.4f}",
            )
            for s, v in history
        ),
    )
    return format_html(
        '<svg class="sbert-eval-curve" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'role="img" aria-label="{metric} per evaluation">'
        '<rect width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>'
        '<polyline fill="none" stroke="#417690" stroke-width="1.5" points="{xy}"/>{dots}'
        '<text x="4" y="{top}" font-size="10">{hi}</text>'
        '<text x="4" y="{bottom}" font-size="10">{lo}</text>'
        '<text x="{right}" y="14" font-size="10" text-anchor="end">{metric}</text>'
        "</svg>",
        w=width,
        h=height,
        xy=xy,
        dots=dots,
        top=pad,
        bottom=height - pad,
        hi=f"{hi:.4f}",
        lo=f"{lo:.4f}",
        right=width - 4,
        metric=metric,
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


MODE_COLOURS = {  # one colour per search mode in the quality chart
    "vector": "#417690",
    "keyword": "#b8860b",
    "hybrid": "#1a7f37",
    "passages": "#8a3ffc",
}


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
    pad, top = 36, 16
    first = min(t for t, _, _ in points)
    last = max(t for t, _, _ in points)
    # A promotion up to a day before the first point is shown (its evaluation follows it).
    marks = [(t, label) for t, label in marks if first - timedelta(days=1) <= t <= last]
    first = min([first, *(t for t, _ in marks)])
    span = (last - first).total_seconds() or 1.0

    def x(when: datetime) -> float:
        if last == first:
            return width / 2
        return pad + (when - first).total_seconds() / span * (width - 2 * pad)

    def y(value: float) -> float:
        return height - pad - max(0.0, min(1.0, value)) * (height - pad - top)

    lines = []
    legend = []
    metrics_seen: list[str] = []
    for (name, metric), line in sorted(series.items()):
        if metric not in metrics_seen:
            metrics_seen.append(metric)
        colour = MODE_COLOURS.get(name, "#666")
        dash = "" if metric == metrics_seen[0] else "4 3"
        xy = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v, _ in line)
        dots = format_html_join(
            "",
            '<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{} {} {}: {} ({})</title></circle>',
            (
                (f"{x(t):.1f}", f"{y(v):.1f}", colour, name, metric, f"{t:%Y-%m-%d %H:%M}",
                 f"{v:.4f}", note)
                for t, v, note in line
            ),
        )  # fmt: skip
        lines.append(
            format_html(
                '<polyline class="sbert-series" data-series="{} {}" fill="none" stroke="{}" '
                'stroke-width="1.5" stroke-dasharray="{}" points="{}"/>{}',
                name,
                metric,
                colour,
                dash,
                xy,
                dots,
            )
        )
        legend.append((colour, "dashed" if dash else "solid", f"{name} {metric}"))
    rules = format_html_join(
        "",
        '<g class="sbert-promotion"><line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" '
        'stroke="#ba2121" stroke-dasharray="2 2"/><text x="{x}" y="{label}" font-size="9" '
        'text-anchor="middle" fill="#ba2121">{version}</text><title>promoted {version} '
        "on {when}</title></g>",
        (
            {
                "x": f"{x(t):.1f}",
                "top": top,
                "bottom": height - pad,
                "label": top - 4,
                "version": label,
                "when": f"{t:%Y-%m-%d %H:%M}",
            }
            for t, label in marks
        ),
    )
    svg = format_html(
        '<svg class="sbert-quality-chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'role="img" aria-label="search quality over time">'
        '<rect width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>'
        '<line x1="{pad}" y1="{y1}" x2="{right}" y2="{y1}" stroke="#e0e0e0"/>'
        '<line x1="{pad}" y1="{y0}" x2="{right}" y2="{y0}" stroke="#ccc"/>'
        "{rules}{lines}"
        '<text x="4" y="{y1t}" font-size="10">1.0</text>'
        '<text x="4" y="{y0t}" font-size="10">0.0</text>'
        '<text x="{pad}" y="{h2}" font-size="10">{first}</text>'
        '<text x="{right}" y="{h2}" font-size="10" text-anchor="end">{last}</text>'
        "</svg>",
        w=width,
        h=height,
        pad=pad,
        right=width - pad,
        y1=f"{y(1.0):.1f}",
        y0=f"{y(0.0):.1f}",
        y1t=f"{y(1.0) + 4:.1f}",
        y0t=f"{y(0.0) + 4:.1f}",
        rules=rules,
        lines=format_html_join("", "{}", ((line,) for line in lines)),
        h2=height - 8,
        first=f"{first:%Y-%m-%d %H:%M}",
        last=f"{last:%Y-%m-%d %H:%M}",
    )
    keys = format_html_join(
        " ",
        '<span style="white-space:nowrap"><span style="display:inline-block;width:18px;'
        'border-top:2px {} {};vertical-align:middle"></span> {}</span>',
        ((style, colour, label) for colour, style, label in legend),
    )
    note = " Dashed red lines: promotions." if marks else ""
    return format_html('<div>{}</div><p class="sbert-chart-legend">{}{}</p>', svg, keys, note)
