"""The evaluation gate: is a candidate version at least as good as the one serving?

::

    verdict = gate(candidate)      # GateResult(passed, metric, candidate={...}, active={...})
    verdict.describe()             # "ndcg@10: candidate 0.7012 vs active 0.6650"

Both versions are measured on the candidate run's ``eval`` pairs (``eval_metrics``): STS
Spearman for scored pairs; nDCG@10 and Recall@10 for positive pairs (each ``text_a`` a query,
every ``text_b`` the corpus). The gate compares the first of ``PRIMARY_METRICS`` both have and
refuses a candidate worse than the active version by more than
``SBERT["EVAL_GATE_TOLERANCE"]``. A candidate it cannot compare (its run deleted, no eval pairs,
a SimCSE run on content) does not pass either ("no evaluation: ..."). Promotion asks it first
(``promotion.start_promotion``); only a forced promotion, for superusers, skips a refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..conf import sbert_settings
from ..encoder.evaluation import retrieval_metrics, sts_spearman
from ..models import EncoderVersion, TrainingPair
from ..serving import get_encoder, serving

PRIMARY_METRICS = ("ndcg@10", "sts_spearman")  # what the evaluation gate compares, in order


@dataclass
class GateResult:
    """The evaluation gate's verdict, with the numbers it compared.

    ``metric`` is None when nothing could be compared (``reason`` says why): such a verdict
    does not pass, and only a forced promotion (superusers) goes ahead.
    """

    passed: bool
    metric: str | None
    candidate: dict[str, float]
    active: dict[str, float]
    reason: str = ""

    @property
    def evaluated(self) -> bool:
        """Whether the candidate was measured against the active version at all."""
        return self.metric is not None

    def describe(self) -> str:
        if self.metric is None:
            return f"no evaluation: {self.reason or 'no metric to compare'}"
        return (
            f"{self.metric}: candidate {self.candidate[self.metric]:.4f} vs active "
            f"{self.active[self.metric]:.4f}"
        )


def eval_metrics(encoder: Any, pairs: Sequence[TrainingPair]) -> dict[str, float]:
    """STS Spearman over scored pairs; nDCG@10 and Recall@10 over positive pairs."""
    metrics: dict[str, float] = {}
    scored = [(p.text_a, p.text_b, p.score) for p in pairs if p.score is not None]
    if len(scored) >= 2:
        metrics["sts_spearman"] = sts_spearman(encoder, scored)
    positives = [p for p in pairs if p.score is None and not p.label]
    if positives:
        relevant: dict[str, set[str]] = {}
        for p in positives:
            relevant.setdefault(p.text_a, set()).add(p.text_b)
        queries = {text: text for text in relevant}
        corpus = {p.text_b: p.text_b for p in positives}
        result = retrieval_metrics(encoder, queries, corpus, relevant, k=10)
        metrics["ndcg@10"] = result["ndcg@10"]
        metrics["recall@10"] = result["recall@10"]
    if metrics:
        metrics["eval_pairs"] = len(pairs)
    return metrics


def primary_metric(*metric_sets: dict[str, float]) -> str | None:
    """The first of ``PRIMARY_METRICS`` that every set has."""
    for name in PRIMARY_METRICS:
        if all(name in m for m in metric_sets):
            return name
    return None


def gate(candidate: EncoderVersion) -> GateResult:
    """Compare ``candidate`` with the serving version on the candidate's eval split.

    A candidate that cannot be compared (its run was deleted, the run had no eval pairs, a
    content run, no metric both versions have) does not pass: see ``GateResult.reason``.
    """
    current = serving(candidate.encoder_name, max_age=0)
    run = candidate.run
    metrics = dict(candidate.metrics)
    if run is None:
        return _unmeasured(metrics, {}, "the training run of this version was deleted")
    if "content" in run.data and not run.data.get("eval"):
        # Its metrics, if any, are on pseudo-pairs held back from the content (pseudo_*).
        return _unmeasured(
            metrics, {}, f"training run {run.pk} adapted to content, with no eval pairs"
        )
    if run.base_version == current.version and run.metrics_before:
        active = dict(run.metrics_before)  # the run measured it on the same pairs
    elif run.data.get("eval"):
        pairs = list(TrainingPair.objects.filter(pk__in=run.data["eval"]))
        if not pairs:
            return _unmeasured(metrics, {}, f"the eval pairs of training run {run.pk} were deleted")
        active = eval_metrics(get_encoder(candidate.encoder_name, current.version), pairs)
    else:
        return _unmeasured(metrics, {}, f"training run {run.pk} had no eval pairs")
    name = primary_metric(metrics, active)
    if name is None:
        return _unmeasured(
            metrics,
            active,
            f"the eval pairs of training run {run.pk} gave no "
            f"{' or '.join(PRIMARY_METRICS)} for both versions",
        )
    tolerance = float(sbert_settings.EVAL_GATE_TOLERANCE or 0.0)
    return GateResult(metrics[name] >= active[name] - tolerance, name, metrics, active)


def _unmeasured(candidate: dict[str, float], active: dict[str, float], reason: str) -> GateResult:
    return GateResult(False, None, candidate, active, reason)
