"""``ranking_metrics`` equals trec_eval (pytrec_eval) on SciFact's train claims, to 1e-6.

nDCG@10 is trec_eval's ``ndcg_cut_10`` (gain = grade), Recall@10 and @100 its ``recall_10`` and
``recall_100``, MRR@10 its ``recip_rank`` over each run's top 10. The rankings are BM25's
(``encoder/lexical.py``) and the tiny model's cosine ranking over the 5,183 abstracts, 100
deep; the qrels are SciFact's own (binary) and a graded version of them: a cited abstract is 3
when its evidence supports the claim, 2 when it contradicts it, 1 without evidence, and a seeded
draw of BM25's top 30 gets grades 0-2, so queries mix grades and hold judged non-relevant rows.
No database is involved.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from django_sbert.encoder.lexical import BM25
from django_sbert.encoder.metrics import ranking_metrics

pytrec_eval = pytest.importorskip("pytrec_eval")

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("SBERT_SHARED", ROOT.parent / "shared"))
SCIFACT = Path(os.environ.get("SBERT_DATA_DIR", SHARED / "data")) / "scifact"  # as benchmarks/
DEPTH = 100
TOLERANCE = 1e-6

pytestmark = pytest.mark.skipif(
    not (SCIFACT / "corpus.jsonl").is_file(), reason=f"SciFact is not at {SCIFACT}"
)


@pytest.fixture(scope="module")
def scifact() -> dict:
    corpus = {}
    with (SCIFACT / "corpus.jsonl").open() as lines:
        for line in lines:
            doc = json.loads(line)
            corpus[doc["_id"]] = f"{doc['title']} {doc['text']}".strip()
    queries, evidence = {}, {}
    with (SCIFACT / "queries-train.jsonl").open() as lines:
        for line in lines:
            claim = json.loads(line)
            queries[claim["_id"]] = claim["text"]
            evidence[claim["_id"]] = {
                doc: {e["label"] for e in found} for doc, found in claim["metadata"].items()
            }
    binary: dict[str, dict[str, int]] = {}
    with (SCIFACT / "qrels-train.tsv").open() as lines:
        next(lines)  # query-id, corpus-id, score
        for line in lines:
            qid, doc, score = line.split()
            binary.setdefault(qid, {})[doc] = int(score)
    ids = list(corpus)
    bm25 = BM25([corpus[d] for d in ids])
    lexical = {}
    for qid, text in queries.items():
        order = np.argsort(-bm25.scores(text), kind="stable")[:DEPTH]
        lexical[qid] = [ids[i] for i in order]
    return {
        "ids": ids,
        "corpus": corpus,
        "queries": queries,
        "binary": binary,
        "graded": _graded(binary, evidence, lexical),
        "bm25": lexical,
    }


def _graded(
    binary: dict[str, dict[str, int]],
    evidence: dict[str, dict[str, set[str]]],
    lexical: dict[str, list[str]],
) -> dict[str, dict[str, int]]:
    draw = random.Random(47)
    graded: dict[str, dict[str, int]] = {}
    for qid, cited in binary.items():
        grades = {}
        for doc in lexical.get(qid, [])[:30]:
            if draw.random() < 0.2:
                grades[doc] = draw.choice([0, 0, 1, 2])
        for doc in cited:
            labels = evidence.get(qid, {}).get(doc, set())
            grades[doc] = 3 if "SUPPORT" in labels else 2 if "CONTRADICT" in labels else 1
        graded[qid] = grades
    return graded


def _trec(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict:
    """trec_eval's figures per query: the run scored by rank, so that its order is ours."""

    def run(depth: int) -> dict[str, dict[str, float]]:
        return {
            qid: {doc: float(DEPTH - rank) for rank, doc in enumerate(docs[:depth])}
            for qid, docs in rankings.items()
        }

    deep = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10,100"}).evaluate(
        run(DEPTH)
    )
    top = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run(10))
    return {qid: {**deep[qid], **top[qid]} for qid in deep}


def _compare(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict:
    ours = ranking_metrics(rankings, qrels, 10)
    theirs = _trec(rankings, qrels)
    judged = {qid for qid, grades in qrels.items() if any(g > 0 for g in grades.values())}
    assert set(ours["per_query"]) == judged & set(rankings)
    pairs = {
        "ndcg@10": "ndcg_cut_10",
        "recall@10": "recall_10",
        "recall@100": "recall_100",
        "mrr@10": "recip_rank",
    }
    for qid, mine in ours["per_query"].items():
        for name, trec_name in pairs.items():
            assert mine[name] == pytest.approx(theirs[qid][trec_name], abs=TOLERANCE), (
                qid,
                name,
            )
    for name, trec_name in pairs.items():
        mean = float(np.mean([theirs[qid][trec_name] for qid in ours["per_query"]]))
        assert ours[name] == pytest.approx(mean, abs=TOLERANCE), name
    empty = np.mean([theirs[qid]["recall_10"] == 0 for qid in ours["per_query"]])
    assert ours["no_relevant@10"] == pytest.approx(float(empty), abs=TOLERANCE)
    return ours


@pytest.mark.heavy
def test_bm25_rankings_with_binary_qrels(scifact):
    ours = _compare(scifact["bm25"], scifact["binary"])
    assert ours["queries"] == 809
    assert 0.3 < ours["ndcg@10"] < ours["recall@100"] < 1.0  # a real ranking, not a degenerate one


@pytest.mark.heavy
def test_bm25_rankings_with_graded_qrels(scifact):
    graded = scifact["graded"]
    assert {g for grades in graded.values() for g in grades.values()} == {0, 1, 2, 3}
    assert sum(len({g for g in grades.values() if g}) > 1 for grades in graded.values()) > 100
    ours = _compare(scifact["bm25"], graded)
    binary = ranking_metrics(scifact["bm25"], scifact["binary"], 10)
    assert ours["ndcg@10"] != pytest.approx(binary["ndcg@10"], abs=1e-3)  # the grades count


@pytest.mark.heavy
def test_tiny_model_rankings_with_both_qrels(scifact, tiny_encoder):
    ids, corpus, queries = scifact["ids"], scifact["corpus"], scifact["queries"]
    docs = np.asarray(tiny_encoder.encode([corpus[d] for d in ids], normalize=True))
    asked = list(queries)
    vectors = np.asarray(tiny_encoder.encode([queries[q] for q in asked], normalize=True))
    order = np.argsort(-(vectors @ docs.T), axis=1, kind="stable")[:, :DEPTH]
    rankings = {qid: [ids[i] for i in order[row]] for row, qid in enumerate(asked)}
    _compare(rankings, scifact["binary"])
    _compare(rankings, scifact["graded"])


def test_sets_and_grades_of_one_agree_and_shallow_rankings_have_no_recall_at_100(scifact):
    shallow = {qid: docs[:10] for qid, docs in scifact["bm25"].items()}
    as_sets = {qid: set(grades) for qid, grades in scifact["binary"].items()}
    by_grade = ranking_metrics(shallow, scifact["binary"], 10)
    by_set = ranking_metrics(shallow, as_sets, 10)
    assert by_grade == by_set
    assert "recall@100" not in by_set and "recall@100" not in by_set["per_query"]["0"]
