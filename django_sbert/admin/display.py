"""HTML pieces of the fine-tuning admin: a progress bar, a loss curve, a metrics table.

Server-side HTML and inline SVG, no JavaScript library.
"""

from __future__ import annotations

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
        '<text x="4" y="{top}" font-size="10">{hi:.3f}</text>'
        '<text x="4" y="{bottom}" font-size="10">{lo:.3f}</text>'
        '<text x="{right}" y="{h2}" font-size="10" text-anchor="end">step {last:.0f}</text>'
        "</svg>",
        w=width,
        h=height,
        xy=xy,
        top=pad,
        bottom=height - pad,
        hi=hi,
        lo=lo,
        right=width - 4,
        h2=height - 6,
        last=steps[-1],
    )


def metrics_table(*columns: tuple[str, dict[str, float]]) -> str:
    """Metrics side by side: one column per (title, metrics)."""
    names = [n for n in ("ndcg@10", "recall@10", "sts_spearman", "eval_pairs")
             if any(n in m for _, m in columns)]  # fmt: skip
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
    fusion = [
        (
            title,
            f"rrf_k {m['fusion_rrf_k']:g}, vector weight {m['fusion_vector_weight']:g}, "
            f"keyword weight {m['fusion_keyword_weight']:g}",
        )
        for title, m in models
        if "fusion_rrf_k" in m
    ]
    return format_html(
        "<table><tr><th></th>{}</tr>{}</table><p>{}</p>",
        format_html_join("", "<th>{}</th>", ((side,) for side, _ in SEARCH_SIDES)),
        format_html_join("", "<tr><th>{}</th>{}</tr>", rows),
        format_html_join("; ", "chosen fusion ({}): {}", fusion),
    )
