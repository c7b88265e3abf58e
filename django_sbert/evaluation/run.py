"""Measure a judgment list: each search mode ranks the list's rows for every judged query with
one encoder version, and the rankings are scored against the grades.

::

    evaluations = evaluate(judgment_list)                      # serving version, every mode
    evaluate(judgment_list, version="base", modes=["vector"])  # the settings' model
    evaluate(judgment_list, version="3f2a...", store=False)    # a candidate, not stored
    evaluations[0].metrics
    # {"ndcg@10": .., "recall@10": .., "recall@100": .., "mrr@10": .., "no_relevant@10": ..,
    #  "precision@10": .., "queries": 300, "threshold": {"min_similarity": 0.41, "precision": 0.5},
    #  "timing": {"encode_queries": .., "encode_rows": .., "search": ..}}

The modes are ``MODES`` (``vector``, ``keyword``, ``hybrid``, ``passages``; those the field
cannot do are left out); ``hybrid`` fuses as a search with that version serving would.
Each query ranks the top ``DEPTH`` (100) rows; ``ranking_metrics`` scores them with the grades
as gains (docs/api.md lists the metrics). A row is relevant at grade 1 or more; a query whose
rows are all graded 0 is not scored.

**The serving version** is measured on the live table, as a visitor's search runs. **Another
version** (a candidate, an earlier one, ``"base"``) has no vectors in the table, and measuring
it must not change what is served; so, as ``finetuning.compare`` does, it ranks a bounded
*pool*: every graded row, and each query's top ``DEPTH`` rows by the serving version's vectors
and by keywords, each encoded here with that version. Its vector, passages and hybrid figures
may therefore read slightly higher than once it serves; keyword figures are the live table's.

**Fusion** (hybrid mode): ``metrics["fusion"]`` puts the settings' fusion and the version's
tuned one (a fine-tuning run's, where one won on its held-out eval pairs) side by side on the
list, and tunes a fusion on part of the list's queries (``finetuning.hybrid.choose_fusion``),
judged against the fusion the version uses on the others. With ``keep_fusion=True`` one that
ranked those better is kept on the version's row (a fine-tuned version, or the settings' model
once a promotion recorded it) and serves from then on; without a row it is only reported.

**Threshold** (vector and passages modes): the lowest ``min_similarity`` at which at least
``PRECISION_LEVEL`` (half) of the pooled rows at or above it are relevant (ungraded rows count
as not relevant); None when no cut-off reaches the level.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..conf import sbert_settings
from ..encoder.metrics import ranking_metrics
from ..exceptions import EvaluationError
from ..finetuning.hybrid import choose_fusion, fuse, fusion_metrics, site_fusion
from ..indexing import FieldRef, field_refs
from ..indexing.passages import encode_with_passages
from ..indexing.rows import PendingRow
from ..models import EncoderVersion, Evaluation, JudgmentList
from ..query import as_semantic
from ..query.vectors import EncodedText
from ..serving import FUSION_KEYS, base_version, encode_texts, forget_serving, serving_record
from ..serving.versions import stored_fusion

MODES = ("vector", "keyword", "hybrid", "passages")
TRIGGERS = ("manual", "promotion", "schedule")
K = 10  # the metrics' cut-off
PRECISION_LEVEL = 0.5  # the threshold keeps at least this share of its rows relevant
DEPTH = 100  # rows ranked per query (Recall@100)
METRIC_KEYS = (
    f"ndcg@{K}",
    f"recall@{K}",
    f"recall@{DEPTH}",
    f"mrr@{K}",
    f"no_relevant@{K}",
    f"precision@{K}",
    "queries",
)

Ranked = list[tuple[str, float]]  # (object pk as text, score) best first


@dataclass
class _Task:
    """What one evaluation ranks: the list's field, its queries and their grades."""

    ref: FieldRef
    queries: dict[str, str]  # query id -> text
    grades: dict[str, dict[str, int]]  # query id -> {object_pk: grade}
    timing: dict[str, float] = field(default_factory=dict)


def field_modes(ref: FieldRef) -> tuple[str, ...]:
    """The modes of ``MODES`` the field can search by."""
    modes = ["vector"]
    if ref.field.keyword_search:
        modes += ["keyword", "hybrid"]
    if ref.field.has_passages:
        modes.append("passages")
    return tuple(mode for mode in MODES if mode in modes)


def list_field(judgment_list: JudgmentList) -> FieldRef:
    """The ``FieldRef`` of the list's model and field (``EvaluationError`` when it is gone)."""
    model = judgment_list.content_type.model_class()
    if model is not None:
        for ref in field_refs(model):
            if ref.name == judgment_list.field:
                return ref
    raise EvaluationError(
        f"Judgment list {judgment_list.name!r} grades {judgment_list.content_type}."
        f"{judgment_list.field}, which is not an EmbeddingField of an installed model; "
        "point the list at a model and field that exist."
    )


def resolve_version(encoder_name: str, version: str | None) -> str:
    """The version string measured: None or ``"serving"`` the serving one, ``"base"`` the
    settings' model, else an ``EncoderVersion`` of the encoder by version string or pk."""
    if version in (None, "", "serving"):
        return serving_record(encoder_name, max_age=0).version
    if version == "base":
        return base_version(encoder_name)
    versions = EncoderVersion.objects.filter(encoder_name=encoder_name)
    found = versions.filter(version=version).values_list("version", flat=True).first()
    digits = str(version)
    if found is None and digits.isascii() and digits.isdigit() and len(digits) <= 18:
        found = versions.filter(pk=int(version)).values_list("version", flat=True).first()
    if found is None and version == base_version(encoder_name):
        found = version
    if found is None:
        raise EvaluationError(
            f"Encoder {encoder_name!r} has no version {version!r}: give 'serving', 'base', or "
            "a version string or id from the admin's encoder versions."
        )
    return str(found)


def evaluate(
    judgment_list: JudgmentList,
    *,
    version: str | None = None,
    modes: Sequence[str] | None = None,
    store: bool = True,
    trigger: str = "manual",
    keep_fusion: bool = False,
) -> list[Evaluation]:
    """Measure ``judgment_list`` with ``version`` in each of ``modes`` (see the module).

    ``modes=None``: every mode the field can do; a mode asked for that it cannot do raises
    ``EvaluationError``, as does a list without a query graded 1 or more. Returns one
    ``Evaluation`` per mode, saved unless ``store=False``. ``keep_fusion``: a fusion tuned on
    the list that won on its held-out queries is kept on the version (see the module).
    """
    if trigger not in TRIGGERS:
        raise EvaluationError(f"trigger must be one of {', '.join(TRIGGERS)}, not {trigger!r}.")
    ref = list_field(judgment_list)
    possible = field_modes(ref)
    if modes is None:
        chosen = possible
    else:
        unknown = [mode for mode in modes if mode not in MODES]
        if unknown:
            raise EvaluationError(f"Unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}.")
        missing = [mode for mode in modes if mode not in possible]
        if missing:
            raise EvaluationError(
                f"{ref} cannot search by {missing[0]!r} (it can: {', '.join(possible)}); "
                "keyword and hybrid need EmbeddingField(keyword_search=True), passages "
                "EmbeddingField(passages=True)."
            )
        chosen = tuple(mode for mode in MODES if mode in modes)
    task = _load(judgment_list, ref)
    measured = resolve_version(ref.encoder_name, version)
    serving = serving_record(ref.encoder_name, max_age=0).version
    if measured == serving:
        rankings = _live_rankings(task, chosen, measured)
    else:
        rankings = _pool_rankings(task, chosen, measured)
    level = PRECISION_LEVEL
    corpus_size = ref.manager.count()  # a ranking of every row is complete: recall@100
    evaluations = []
    for mode in chosen:
        ranked, seconds = rankings[mode]
        metrics = score(ranked, task.grades, corpus_size)
        if mode in ("vector", "passages"):
            metrics["threshold"] = {
                "min_similarity": similarity_threshold(ranked, task.grades, level),
                "precision": level,
            }
        if mode == "hybrid" and "sides" in rankings:
            metrics["fusion"] = fusion_report(
                task, rankings["sides"][0], measured, corpus_size, keep_fusion and store
            )
        metrics["timing"] = {
            key: round(value, 4) for key, value in task.timing.items() if key.startswith(mode)
        }
        evaluations.append(
            Evaluation(
                judgment_list=judgment_list,
                version=measured,
                mode=mode,
                metrics=metrics,
                trigger=trigger,
                seconds=round(seconds, 4),
            )
        )
    if store:
        for evaluation in evaluations:
            evaluation.save()
    return evaluations


def score(
    rankings: Mapping[str, Ranked],
    grades: Mapping[str, Mapping[str, int]],
    corpus_size: int | None = None,
) -> dict[str, Any]:
    """``ranking_metrics`` of ``rankings`` against the graded rows, at K and DEPTH
    (``corpus_size``: rows the table holds, so a ranking of them all counts as complete)."""
    ids = {qid: [pk for pk, _ in ranked] for qid, ranked in rankings.items()}
    figures = ranking_metrics(ids, grades, K, corpus_size=corpus_size)
    return {key: figures[key] for key in METRIC_KEYS if key in figures}


def similarity_threshold(
    rankings: Mapping[str, Ranked], grades: Mapping[str, Mapping[str, int]], level: float
) -> float | None:
    """The lowest similarity ``s`` such that at least ``level`` of the returned rows with
    similarity >= ``s`` (over every query) are graded 1 or more; None when none is."""
    scored = sorted(
        (
            (similarity, grades.get(qid, {}).get(pk, 0) >= 1)
            for qid, ranked in rankings.items()
            for pk, similarity in ranked
            if similarity is not None
        ),
        key=lambda item: -item[0],
    )
    found = None
    hits = 0
    for n, (similarity, relevant) in enumerate(scored, start=1):
        hits += relevant
        tie_ends = n == len(scored) or scored[n][0] != similarity
        if tie_ends and hits / n >= level:
            found = float(similarity)
    return found


def _load(judgment_list: JudgmentList, ref: FieldRef) -> _Task:
    queries: dict[str, str] = {}
    grades: dict[str, dict[str, int]] = {}
    for query in judgment_list.queries.prefetch_related("judgments"):
        qid = str(query.pk)
        queries[qid] = query.text
        grades[qid] = {j.object_pk: int(j.grade) for j in query.judgments.all()}
    if not any(grade >= 1 for graded in grades.values() for grade in graded.values()):
        raise EvaluationError(
            f"Judgment list {judgment_list.name!r} has no query with a row graded 1 or more: "
            "grade the relevant rows of its queries first."
        )
    return _Task(ref, queries, grades)


def _encoded_queries(task: _Task, version: str) -> dict[str, str]:
    """The queries as ``EncodedText`` of ``version``: encoded once, in batches, so the
    searches below spend their time in SQL."""
    started = time.perf_counter()
    ids = list(task.queries)
    texts = [task.queries[qid] for qid in ids]
    name = task.ref.encoder_name
    vectors = encode_texts(texts, name, version, role="query") if texts else []
    task.timing["encode_queries"] = time.perf_counter() - started
    return {
        qid: EncodedText(text, name, vector, version)
        for qid, text, vector in zip(ids, texts, vectors, strict=True)
    }


def _search(task: _Task, mode: str, text: str) -> Ranked:
    """One query's top ``DEPTH`` rows in ``mode`` on the live table."""
    ref = task.ref
    qs = as_semantic(ref.manager.all())
    extra: dict[str, Any] = {"passages": mode == "passages"} if ref.field.has_passages else {}
    if mode == "keyword":
        if not text.strip():
            return []
        match = str(sbert_settings.SEARCH["KEYWORD"]["MATCH"])
        rows = qs.keyword_search(text, k=DEPTH, field=ref.name, match=match)
        return [(str(row.pk), float(row.keyword_score)) for row in rows]
    if mode == "hybrid":
        rows = qs.hybrid_search(text, k=DEPTH, field=ref.name, **extra)
        return [(str(row.pk), row.similarity) for row in rows]
    rows = qs.similar_to(text, k=DEPTH, field=ref.name, **extra)
    return [(str(row.pk), float(row.similarity)) for row in rows]


def _live_rankings(
    task: _Task, modes: Sequence[str], version: str
) -> dict[str, tuple[dict[str, Ranked], float]]:
    """Each mode's rankings (and seconds) searched on the live table with the serving
    version."""
    encoded = _encoded_queries(task, version) if set(modes) - {"keyword"} else {}
    out = {}
    for mode in modes:
        started = time.perf_counter()
        rankings = {
            qid: _search(task, mode, encoded.get(qid, text)) for qid, text in task.queries.items()
        }
        spent = time.perf_counter() - started
        task.timing[f"{mode}_search"] = spent
        if mode != "keyword":
            task.timing[f"{mode}_encode_queries"] = task.timing["encode_queries"]
            spent += task.timing["encode_queries"]
        out[mode] = (rankings, spent)
    if "hybrid" in modes:
        sides = {side: out[side][0] if side in out else None for side in ("vector", "keyword")}
        for side in [side for side, found in sides.items() if found is None]:
            sides[side] = {
                qid: _search(task, side, encoded.get(qid, text) if side == "vector" else text)
                for qid, text in task.queries.items()
            }
        out["sides"] = (sides, 0.0)  # type: ignore[assignment]
    return out


def _pool_rankings(
    task: _Task, modes: Sequence[str], version: str
) -> dict[str, tuple[dict[str, Ranked], float]]:
    """Each mode's rankings (and seconds) for a version that does not serve: the pool of the
    module's docstring, encoded with ``version``."""
    ref = task.ref
    started = time.perf_counter()
    serving = _encoded_queries(task, serving_record(ref.encoder_name, max_age=0).version)
    keyword: dict[str, Ranked] = {qid: [] for qid in task.queries}
    if ref.field.keyword_search and {"keyword", "hybrid"} & set(modes):
        keyword = {qid: _search(task, "keyword", text) for qid, text in task.queries.items()}
    pool: dict[str, None] = {}
    for qid in task.queries:
        for pk, _ in _search(task, "vector", serving[qid]) + keyword[qid]:
            pool.setdefault(pk)
        for pk in task.grades[qid]:
            pool.setdefault(pk)
    rows = _pool_rows(ref, list(pool))
    pooled = time.perf_counter() - started
    started = time.perf_counter()
    vectors, passages = (
        encode_with_passages(ref, rows, version=version) if rows else (np.zeros((0, 1)), None)
    )
    encode_rows = time.perf_counter() - started
    asked = _encoded_queries(task, version)
    query_seconds = task.timing["encode_queries"]
    pks = [str(row.pk) for row in rows]
    out: dict[str, tuple[dict[str, Ranked], float]] = {}
    base = pooled + encode_rows + query_seconds
    for mode in modes:
        started = time.perf_counter()
        if mode == "keyword":
            rankings = {qid: ranked[:DEPTH] for qid, ranked in keyword.items()}
        elif mode == "passages":
            rankings = _max_sim(asked, ref, pks, passages)
        else:
            rankings = _cosine(asked, ref, pks, vectors)
            if mode == "hybrid":
                out["sides"] = ({"vector": rankings, "keyword": keyword}, 0.0)  # type: ignore[assignment]
                fusion = _fusion(ref.encoder_name, version)
                depth = int(sbert_settings.SEARCH["FUSION"]["CANDIDATES"])
                rankings = {
                    qid: [
                        (pk, None)
                        for pk in fuse(ranked[:depth], keyword[qid][:depth], **fusion)[:DEPTH]
                    ]
                    for qid, ranked in rankings.items()
                }
        spent = time.perf_counter() - started
        task.timing[f"{mode}_search"] = spent
        if mode != "keyword":
            task.timing[f"{mode}_encode_queries"] = query_seconds
            task.timing[f"{mode}_encode_rows"] = encode_rows
            task.timing[f"{mode}_pool"] = pooled
            spent += base
        out[mode] = (rankings, spent)
    return out


def _pool_rows(ref: FieldRef, pks: Sequence[str]) -> list[PendingRow]:
    """The pool's rows that exist, with their source text (graded pks of deleted rows and
    pks that are not the model's are left out)."""
    to_python = ref.model._meta.pk.to_python
    valid = []
    for pk in pks:
        try:
            valid.append(to_python(pk))
        except Exception:  # ValidationError: a graded pk that cannot be this model's
            continue
    rows = []
    for row in ref.manager.filter(pk__in=valid).order_by("pk"):
        rows.append(PendingRow(row.pk, ref.field.get_source_text(row), ""))
    return rows


def _query_matrix(asked: Mapping[str, str], ref: FieldRef) -> tuple[list[str], np.ndarray]:
    ids = list(asked)
    vectors = [ref.field.fit_vectors(asked[qid].vector) for qid in ids]  # type: ignore[attr-defined]
    return ids, np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)  # (q, dim)


def _top(ids: Sequence[str], pks: Sequence[str], scores: np.ndarray) -> dict[str, Ranked]:
    """Each query's ``DEPTH`` best pks by ``scores`` (q, n), ties to the earlier pk."""
    if not pks:
        return {qid: [] for qid in ids}
    order = np.argsort(-scores, axis=1, kind="stable")[:, :DEPTH]  # (q, depth)
    return {
        qid: [(pks[j], float(scores[row, j])) for j in order[row]] for row, qid in enumerate(ids)
    }


def _cosine(
    asked: Mapping[str, str], ref: FieldRef, pks: Sequence[str], vectors: np.ndarray
) -> dict[str, Ranked]:
    ids, queries = _query_matrix(asked, ref)
    scores = queries @ np.asarray(vectors, dtype=np.float32).T if pks else np.zeros((len(ids), 0))
    return _top(ids, pks, scores)  # scores: (q, n)


def _max_sim(
    asked: Mapping[str, str], ref: FieldRef, pks: Sequence[str], passages: Sequence[Any] | None
) -> dict[str, Ranked]:
    """Rows by their best passage's cosine (the passages search of query/passages.py)."""
    ids, queries = _query_matrix(asked, ref)
    scores = np.full((len(ids), len(pks)), -np.inf, dtype=np.float32)  # (q, n)
    for column, item in enumerate(passages or []):
        if len(item.vectors):
            scores[:, column] = (queries @ np.asarray(item.vectors, dtype=np.float32).T).max(1)
    return _top(ids, pks, scores)


def _fusion(encoder_name: str, version: str) -> dict[str, Any]:
    """``fuse()``'s arguments as ``hybrid_search()`` would fuse while ``version`` serves."""
    fusion = site_fusion()
    if not sbert_settings.SEARCH["FUSION"]["TUNED"]:
        return fusion
    metrics = (
        EncoderVersion.objects.filter(encoder_name=encoder_name, version=version)
        .values_list("metrics", flat=True)
        .first()
    ) or {}
    tuned = stored_fusion(
        [metrics.get(f"fusion_{key}") for key in FUSION_KEYS], metrics.get("fusion_method")
    )
    if tuned is None:
        return fusion
    *numbers, method = tuned
    return {"fusion": method, **dict(zip(FUSION_KEYS, numbers, strict=True))}


def fusion_report(
    task: _Task,
    sides: Mapping[str, Mapping[str, Ranked]],
    version: str,
    corpus_size: int,
    keep: bool,
) -> dict[str, Any]:
    """The settings' fusion, the version's tuned one and one tuned on this list, side by side
    on the list's queries (``metrics["fusion"]``; the module says what is kept)."""
    depth = int(sbert_settings.SEARCH["FUSION"]["CANDIDATES"])
    vector = {qid: list(ranked[:depth]) for qid, ranked in sides["vector"].items()}
    keyword = {qid: list(ranked[:depth]) for qid, ranked in sides["keyword"].items()}

    def ndcg(fusion: Mapping[str, Any]) -> float:
        fused = {
            q: [(pk, None) for pk in fuse(vector[q], keyword.get(q, []), **fusion)] for q in vector
        }
        return float(score(fused, task.grades, corpus_size)[f"ndcg@{K}"])

    settings = site_fusion()
    current = _fusion(task.ref.encoder_name, version)
    tuned = current if current != settings else None
    choice = choose_fusion(vector, keyword, task.grades, current, corpus_size=corpus_size)
    report: dict[str, Any] = {
        "serving": "tuned" if tuned else "settings",
        "settings": {"fusion": settings, f"ndcg@{K}": ndcg(settings)},
        "tuned": {"fusion": tuned, f"ndcg@{K}": ndcg(tuned)} if tuned else None,
        "list": {
            "fusion": choice["candidate"],
            "tuned_on": choice["tuned_on"],
            "heldout_queries": choice["heldout_queries"],
            f"heldout_current_ndcg@{K}": choice["heldout_current"],
            f"heldout_tuned_ndcg@{K}": choice["heldout_candidate"],
            "wins": bool(choice["used"]),
            "kept": False,
        },
    }
    if keep and choice["used"]:
        report["list"]["kept"] = _keep_fusion(task, version, choice)
    return report


def _keep_fusion(task: _Task, version: str, choice: Mapping[str, Any]) -> bool:
    """Store a fusion tuned on a judgment list on ``version``'s row, where it has one: it
    serves while that version does (serving reads ``fusion_*`` with the version)."""
    row = EncoderVersion.objects.filter(encoder_name=task.ref.encoder_name, version=version).first()
    if row is None:
        return False
    fusion = choice["candidate"]
    row.metrics = {
        **(row.metrics or {}),
        **fusion_metrics(fusion),
        "fusion_source": "judgments",
        f"fusion_heldout_ndcg@{K}": float(choice["heldout_candidate"]),
    }
    row.save(update_fields=["metrics"])
    forget_serving(task.ref.encoder_name)
    return True
