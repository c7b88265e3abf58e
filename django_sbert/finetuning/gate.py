"""The evaluation gate: is a candidate version at least as good as the one serving?

::

    verdict = gate(candidate)      # GateResult(passed, metric, candidate={...}, active={...})
    verdict.describe()             # "ndcg@10: candidate 0.7012 vs active 0.6650"

Both versions are measured on the candidate run's ``eval`` pairs (``eval_metrics``), ranked
against the same corpus of *distractors* (``eval_distractors``; the run records their digest,
and a changed corpus measures the candidate again too). The gate compares the first of
``PRIMARY_METRICS`` both have and refuses a candidate worse than the active version, or one it
cannot compare; a candidate trained on visitors' clicks must also hold on the guard set
(``guard``). docs/fine-tuning.md ("Versions, the gate, promotion and rollback") has the rest;
only a forced promotion, for superusers, skips a refusal.

Measuring encodes the eval pairs and up to ``EVAL_DISTRACTORS`` texts with both versions, too
long for a web request: the admin and the API ask ``stored_verdict`` (no encoding: the run's
own measurement of the serving version, or a reason nothing can be compared) and otherwise
leave the gate to the promotion task, which records its steps on the version.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..encoder.metrics import retrieval_metrics, sts_spearman
from ..models import EncoderVersion, TrainingPair
from ..serving import get_encoder, serving_record
from . import guard as guards
from .rows import pool_texts, row_pool

PRIMARY_METRICS = ("ndcg@10", "sts_spearman")  # what the evaluation gate compares, in order
DISTRACTOR_SEED = 0  # the sample of distractors depends on the data alone, never on a run
# Texts the eval queries are ranked against besides their positives, so a small eval split
# still tells a better model apart.
EVAL_DISTRACTORS = 1000
HEAD_CHARS = 32  # a positive this long or longer may match the first sentences of a line
SENTENCE_ENDS = ".!?\"'\u201d)"


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
    guard: guards.GuardCheck | None = None  # a run from behaviour's check on the guard set

    @property
    def evaluated(self) -> bool:
        """Whether the candidate was measured against the active version at all."""
        return self.metric is not None

    def describe(self) -> str:
        if self.metric is None:
            return f"no evaluation: {self.reason or 'no metric to compare'}"
        text = (
            f"{self.metric}: candidate {self.candidate[self.metric]:.4f} vs active "
            f"{self.active[self.metric]:.4f}"
        )
        if self.guard is not None:
            text += f"; {self.guard.describe()}"
        return f"{text}; {self.reason}" if self.reason else text


def eval_metrics(
    encoder: Any, pairs: Sequence[TrainingPair], distractors: Sequence[str] = ()
) -> dict[str, float]:
    """STS Spearman over scored pairs; nDCG@10 and Recall@10 over positive pairs.

    Each positive pair's ``text_a`` is a query ranked against every ``text_b`` plus
    ``distractors`` (``eval_distractors``), all encoded once by ``encoder``.
    """
    metrics: dict[str, float] = {}
    scored = [(p.text_a, p.text_b, p.score) for p in pairs if p.score is not None]
    if len(scored) >= 2:
        metrics["sts_spearman"] = sts_spearman(encoder, scored)
    positives = positive_pairs(pairs)
    if positives:
        queries, corpus, relevant = ranking_task(positives, distractors)
        result = retrieval_metrics(encoder, queries, corpus, relevant, k=10)
        metrics["ndcg@10"] = result["ndcg@10"]
        metrics["recall@10"] = result["recall@10"]
        metrics["eval_distractors"] = len(corpus) - len({p.text_b for p in positives})
    if metrics:
        metrics["eval_pairs"] = len(pairs)
    return metrics


def positive_pairs(pairs: Iterable[TrainingPair]) -> list[TrainingPair]:
    """The pairs that are ranked (no score, no label): a query and one relevant text."""
    return [p for p in pairs if p.score is None and not p.label]


def ranking_task(
    positives: Sequence[TrainingPair], distractors: Sequence[str] = ()
) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """``(queries, corpus, relevant)`` of positive pairs, keyed by text: each ``text_a`` a
    query, relevant to its ``text_b``s; the corpus every ``text_b`` then the distractors."""
    relevant: dict[str, set[str]] = {}
    for p in positives:
        relevant.setdefault(p.text_a, set()).add(p.text_b)
    queries = {text: text for text in relevant}
    corpus = {p.text_b: p.text_b for p in positives}
    for text in distractors:
        corpus.setdefault(text, text)
    return queries, corpus, relevant


def eval_distractors(
    encoder_name: str,
    evaluation: Sequence[TrainingPair],
    train: Sequence[TrainingPair] = (),
    limit: int | None = None,
) -> list[str]:
    """The texts the eval split's queries are ranked against besides its own positives.

    A seeded sample (``DISTRACTOR_SEED``) of at most ``limit`` (``EVAL_DISTRACTORS`` when
    None) texts drawn from the rows of every field of
    ``encoder_name`` (the first ``rows.MINING_ROWS`` in primary-key order, as
    hard-negative mining reads them) and the positives of the ``train`` pairs; the eval
    split's own positives are never among them, nor a row that holds one (``PositiveIndex``:
    the row a pair was cut from, e.g. an article whose body starts with its pair's lead
    paragraph, is relevant to that pair's query, not a distractor). It depends only on the
    data, so two versions
    measured on it are measured on the same corpus. Without rows or train pairs (pairs from
    a file, no embedded rows) it is empty: the eval positives alone, as before distractors.
    """
    limit = int(EVAL_DISTRACTORS if limit is None else limit)
    positives = positive_pairs(evaluation)
    if limit <= 0 or not positives:
        return []
    exclude = {p.text_b for p in positives}
    holds_positive = PositiveIndex(exclude)
    refs, pool = row_pool(encoder_name)  # (index in refs, pk); (-1, a train positive) below
    # Sorted: the sample must not depend on the order the pairs were read in.
    pool.extend((-1, text) for text in sorted({p.text_b for p in positive_pairs(train)}))
    random.Random(DISTRACTOR_SEED).shuffle(pool)
    chosen: list[str] = []
    seen = set(exclude)
    start = 0
    while len(chosen) < limit and start < len(pool):
        # Read what is still missing (a few more: some texts are empty, repeated or positives).
        chunk = pool[start : start + limit - len(chosen) + 16]
        start += len(chunk)
        texts = pool_texts(refs, chunk)
        for item in chunk:
            text = texts.get(item, "")
            if text and text not in seen and len(chosen) < limit and not holds_positive(text):
                seen.add(text)
                chosen.append(text)
    return chosen


class PositiveIndex:
    """Tells whether a text holds one of ``positives`` at the start of one of its lines.

    A row's text joins its fields line by line (``EmbeddingField.get_source_text``), and pairs
    made from rows (``pairs.content_pairs``) take a field, or its first sentences, as the
    positive: such a row contains its pair's answer and is presumed relevant. A positive
    matches a whole line, or, when it is ``HEAD_CHARS`` characters or more and ends a sentence,
    the first sentences of a line; so a short title does not match every line that begins the
    same way, nor "the answer 2" the answer.
    """

    def __init__(self, positives: Iterable[str]) -> None:
        self.heads: dict[str, list[str]] = {}
        self.short: set[str] = set()
        for text in positives:
            text = text.strip()
            if len(text) >= HEAD_CHARS:
                self.heads.setdefault(text[:HEAD_CHARS], []).append(text)
            elif text:
                self.short.add(text)

    def __call__(self, text: str) -> bool:
        for line in text.splitlines():
            line = line.strip()
            if line in self.short:
                return True
            for positive in self.heads.get(line[:HEAD_CHARS], ()):
                if line == positive or (
                    line.startswith(positive)
                    and positive[-1] in SENTENCE_ENDS
                    and line[len(positive)].isspace()
                ):
                    return True
        return False


def corpus_digest(distractors: Sequence[str]) -> str:
    """A fingerprint of a distractor sample: equal digests, the same corpus."""
    digest = hashlib.sha256()
    for text in distractors:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()


def corpus_record(distractors: Sequence[str]) -> dict[str, Any]:
    """What a run stores (``TrainingRun.data["eval_corpus"]``) about its distractors."""
    return {"distractors": len(distractors), "digest": corpus_digest(distractors)}


def primary_metric(*metric_sets: dict[str, float]) -> str | None:
    """The first of ``PRIMARY_METRICS`` that every set has."""
    for name in PRIMARY_METRICS:
        if all(name in m for m in metric_sets):
            return name
    return None


Progress = Callable[[int, int], Any]  # (steps done, steps in all) of a gate that measures


def gate(candidate: EncoderVersion, progress: Progress | None = None) -> GateResult:
    """Compare ``candidate`` with the serving version on the candidate's eval split.

    A candidate that cannot be compared (its run was deleted, the run had no eval pairs, a
    content run, no metric both versions have) does not pass: see ``GateResult.reason``.
    When the run did not measure the serving version itself, both are encoded here (the eval
    pairs and up to ``EVAL_DISTRACTORS`` texts): minutes on a large model, so web requests ask
    ``stored_verdict`` and leave this to the promotion task. ``progress(done, total)`` is
    called as the measuring goes.
    """
    verdict = _verdict(candidate, measure=True, progress=progress)
    assert verdict is not None  # measure=True always answers
    return verdict


def stored_verdict(candidate: EncoderVersion) -> GateResult | None:
    """The gate's verdict when it needs no encoding (the run measured the serving version on
    the same pairs, or nothing can be compared); None when both versions must be measured,
    which ``gate`` does (in the promotion task, not in a web request)."""
    return _verdict(candidate, measure=False)


def _verdict(
    candidate: EncoderVersion, *, measure: bool, progress: Progress | None = None
) -> GateResult | None:
    current = serving_record(candidate.encoder_name, max_age=0)
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
        active = dict(run.metrics_before)  # the run measured it on the same pairs and corpus
    elif run.data.get("eval"):
        pairs = list(TrainingPair.objects.filter(pk__in=run.data["eval"]))
        if not pairs:
            return _unmeasured(metrics, {}, f"the eval pairs of training run {run.pk} were deleted")
        if not measure:
            return None
        step = progress or (lambda done, total: None)
        step(0, 3)
        train = list(TrainingPair.objects.filter(pk__in=run.data.get("train", [])))
        distractors = eval_distractors(candidate.encoder_name, pairs, train)
        step(1, 3)
        active = eval_metrics(
            get_encoder(candidate.encoder_name, current.version), pairs, distractors
        )
        step(2, 3)
        # A run from before distractors measured the eval positives alone.
        recorded = (run.data.get("eval_corpus") or {}).get("digest", corpus_digest([]))
        if corpus_digest(distractors) != recorded:
            # Rows or pairs changed since the run measured its candidate: measure it again,
            # so that both versions are ranked against the same corpus.
            again = get_encoder(candidate.encoder_name, candidate.version)
            metrics.update(eval_metrics(again, pairs, distractors))
        step(3, 3)
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
    verdict = GateResult(metrics[name] >= active[name], name, metrics, active)
    if not guards.from_behaviour(run):
        return verdict
    check = guards.stored(run, current.version)
    if check is None:
        if not measure:
            return None  # measured by the promotion task
        check = guards.measure(
            candidate.encoder_name,
            current.version,
            get_encoder(candidate.encoder_name, current.version),
            get_encoder(candidate.encoder_name, candidate.version),
        )
    if check is None:
        verdict.passed = False
        verdict.reason = "a run from behaviour needs a guard set: the encoder has no rows"
        return verdict
    verdict.guard = check
    if not check.passed:
        verdict.passed = False
        verdict.reason = (
            f"refused: it loses more than {guards.GUARD_TOLERANCE} nDCG@10 on the guard set"
        )
    return verdict


def _unmeasured(candidate: dict[str, float], active: dict[str, float], reason: str) -> GateResult:
    return GateResult(False, None, candidate, active, reason)
