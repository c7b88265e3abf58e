"""The guard: a run from behaviour must also hold on evidence no visitor writes.

Visitors' clicks make both a run from behaviour's lesson (its train pairs) and its exam (the
eval pairs of later days), so whoever controls enough clicks could write both. Such a run is
also measured, beside the serving version, on a *guard set* that no visitor controls: the
site's judged queries for the encoder's fields, less any a visitor typed, else pseudo-queries
cut from the encoder's rows (``encoder.pseudo_queries``), each ranked among a sample of rows
seeded by the serving version (docs/learning.md).

The gate refuses a candidate whose guard nDCG@10 is more than ``GUARD_TOLERANCE`` below the
serving version's, whatever the eval pairs say (``gate``). Measured at the end of the run
(``record``), on the worker; measured again by the promotion task if the serving version
changed since.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ..encoder.metrics import retrieval_metrics
from ..encoder.pseudo_queries import pseudo_pairs
from ..indexing import get_ref, light_rows
from ..models import BEHAVIOUR_SOURCE, JudgedQuery, TrainingPair, TrainingRun
from .rows import pool_texts, row_pool

GUARD_QUERIES = 200  # pseudo-queries (or judged queries) measured at most
GUARD_ROWS = 600  # rows ranked per query at most, answers included
# nDCG@10 a candidate may lose there against the serving version: honest runs on 5,000
# simulated SciFact visitors lost 0.007 to 0.012 on 200 queries cut from the abstracts.
GUARD_TOLERANCE = 0.02
RELEVANT_GRADE = 2  # a judged row counts as relevant from this grade


@dataclass
class GuardSet:
    """Queries, the rows they rank (by key) and which rows answer each."""

    source: str  # "judgments" or "content"
    queries: dict[str, str]
    corpus: dict[str, str]
    relevant: dict[str, set[str]]


@dataclass
class GuardCheck:
    """A guard measurement: the serving version's nDCG@10 and the candidate's."""

    source: str
    queries: int
    active: float
    candidate: float
    version: str  # the serving version it was measured against

    @property
    def passed(self) -> bool:
        return self.candidate >= self.active - GUARD_TOLERANCE

    def describe(self) -> str:
        return (
            f"guard ({self.queries} {self.source} queries no visitor wrote): candidate "
            f"{self.candidate:.4f} vs active {self.active:.4f}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "queries": self.queries,
            "active": self.active,
            "candidate": self.candidate,
            "version": self.version,
            "passed": self.passed,
        }


def from_behaviour(run: TrainingRun) -> bool:
    """Whether ``run`` trained on pairs from visitors' clicks."""
    train = run.data.get("train") or []
    return TrainingPair.objects.filter(pk__in=train, source__startswith=BEHAVIOUR_SOURCE).exists()


def _rows(encoder_name: str, seed: str, limit: int) -> list[tuple[str, str]]:
    """A seeded sample of at most ``limit`` (key, text) of the encoder's rows
    (``rows.row_pool``)."""
    refs, pool = row_pool(encoder_name)
    random.Random(seed).shuffle(pool)
    chosen = pool[:limit]
    texts = pool_texts(refs, chosen)
    return [
        (f"{refs[i].label}.{refs[i].name}:{pk}", texts[(i, pk)])
        for i, pk in chosen
        if texts.get((i, pk))
    ]


def _judged(encoder_name: str, version: str) -> GuardSet | None:
    """The guard set of the encoder's judgment lists; None without judged queries."""
    visitors = TrainingPair.objects.filter(source__startswith=BEHAVIOUR_SOURCE).values("text_a")
    found = (
        JudgedQuery.objects.exclude(text__in=visitors)
        .select_related("judgment_list__content_type")
        .prefetch_related("judgments")
        .order_by("pk")
    )
    queries: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    wanted: dict[tuple[str, str], set[str]] = {}  # (label, field) -> pks
    for judged in found:
        listed = judged.judgment_list
        label = listed.content_type.model_class()._meta.label if listed.content_type else ""
        try:
            ref = get_ref(label, listed.field)
        except (LookupError, ValueError, AttributeError):
            continue
        if ref.encoder_name != encoder_name:
            continue
        key = f"q{judged.pk}"
        prefix = f"{ref.label}.{ref.name}:"
        graded = {j.object_pk: j.grade for j in judged.judgments.all()}
        answers = {prefix + pk for pk, grade in graded.items() if grade >= RELEVANT_GRADE}
        if not answers:
            continue
        queries[key], relevant[key] = judged.text, answers
        wanted.setdefault((ref.label, ref.name), set()).update(graded)
        if len(queries) >= GUARD_QUERIES:
            break
    if not queries:
        return None
    corpus: dict[str, str] = {}
    for (label, name), pks in wanted.items():
        ref = get_ref(label, name)
        for row in light_rows(ref, ref.manager.filter(pk__in=list(pks))):
            corpus[f"{label}.{name}:{row.pk}"] = ref.field.get_source_text(row).strip()
    for key, text in _rows(encoder_name, f"guard:{version}", GUARD_ROWS):
        if len(corpus) >= GUARD_ROWS:
            break
        corpus.setdefault(key, text)
    return GuardSet("judgments", queries, corpus, relevant)


def _content(encoder_name: str, version: str) -> GuardSet | None:
    """The guard set of pseudo-queries cut from the encoder's rows; None without rows."""
    rows = _rows(encoder_name, f"guard:{version}", GUARD_ROWS)
    if not rows:
        return None
    built = pseudo_pairs([text for _, text in rows[:GUARD_QUERIES]], method="ict", seed=0)
    queries: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    corpus = dict(rows)
    for pair in built.pairs:
        key = rows[pair.document][0]
        corpus[key] = pair.positive  # the row without its query sentence
        queries[key] = pair.query
        relevant[key] = {key}
    return GuardSet("content", queries, corpus, relevant) if queries else None


def guard_set(encoder_name: str, version: str) -> GuardSet | None:
    """The encoder's guard set while ``version`` serves: its judged queries, else queries cut
    from its rows; None when it has neither."""
    return _judged(encoder_name, version) or _content(encoder_name, version)


def measure(
    encoder_name: str, version: str, active: Any, candidate: Any, found: GuardSet | None = None
) -> GuardCheck | None:
    """nDCG@10 of the serving version (``active``, serving ``version``) and of ``candidate``
    on the guard set; None when the encoder has no rows to build one."""
    found = found or guard_set(encoder_name, version)
    if found is None:
        return None
    scores = [
        retrieval_metrics(encoder, found.queries, found.corpus, found.relevant, k=10)
        for encoder in (active, candidate)
    ]
    return GuardCheck(
        found.source,
        int(scores[0]["queries"]),
        float(scores[0]["ndcg@10"]),
        float(scores[1]["ndcg@10"]),
        version,
    )


def record(run: TrainingRun, active: Any, candidate: Any, version: str) -> GuardCheck | None:
    """Measure a run from behaviour's guard and keep it in ``run.data["guard"]``."""
    check = measure(run.encoder_name, version, active, candidate)
    run.data = {**run.data, "guard": check.as_dict() if check else None}
    TrainingRun.objects.filter(pk=run.pk).update(data=run.data)
    return check


def stored(run: TrainingRun, version: str) -> GuardCheck | None:
    """The run's guard measured against ``version``, if it was."""
    found = run.data.get("guard")
    if not found or found.get("version") != version:
        return None
    return GuardCheck(
        found["source"], found["queries"], found["active"], found["candidate"], version
    )


__all__ = [
    "GUARD_TOLERANCE",
    "GuardCheck",
    "GuardSet",
    "from_behaviour",
    "guard_set",
    "measure",
    "record",
    "stored",
]
