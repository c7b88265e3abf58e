"""The admin's fine-tuning workflow on SciFact: does search get better after promotion?

Everything goes through the code the admin uses: pairs are imported with
``django_sbert.pairs.import_pairs`` (the import page), the run is created with
``runs.create_run`` and executed by ``execute_run`` (what the Celery task
runs), the candidate is promoted with ``promotion.start_promotion`` (gate included) and the
rows are re-embedded by ``promotion.run_promotion``. Search is ``Article.objects.similar_to``.

Data (../shared/data/scifact, nothing from ../shared/eval):

* the train queries are split with a fixed seed: ``--dev-share`` (20%) *dev* (only measured),
  ``--gate-share`` (10%) *gate* (the eval split the run's early stopping and the promotion
  gate use), the rest *train* (one pair per relevant abstract); ``--dev-share 0`` trains on
  every train claim but the gate split, and measures search on the gate split;
* the corpus: every abstract relevant to any train query, plus seeded distractors up to
  ``--rows`` (default 2,000; 0: all 5,183) rows of ``testapp.Article`` (title, abstract).

The run gets the hyperparameters given on the command line and the default recipe for the
rest (``RECIPES``: what a staff user who changes nothing gets). ``--sts-file`` sets
``SBERT["TRAINING"]["STS_FILE"]``, so the run measures general quality before and after.

Reported: nDCG@10 and Recall@10 over the dev queries, before and after the promotion, of
``similar_to`` and of ``hybrid_search`` (after: with the fusion the run chose on the gate
split), the run's evaluations (kept step), the gate's numbers, and the time of each step.

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.admin_finetune --rows 2000 [--json PATH]
    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.admin_finetune --rows 0 --dev-share 0.5 \
        --gate-share 0.1 --sts-file ../shared/data/stsbenchmark/sts-dev.csv

``--equal-keyword-weights`` ranks keyword matches (``hybrid_search``'s keyword side) with the
title weighed as the body, the field weights SciFact's keyword search measures better with
(docs/hybrid.md); the default is PostgreSQL's convention, the title first.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import tempfile
import time
from collections.abc import Iterator

from benchmarks.common import DATA, add_json_option, cpu_line, load_average, write_json
from benchmarks.django_setup import article_model

SCIFACT = DATA / "scifact"
MODEL = "all-MiniLM-L6-v2"


def setup_django(
    threads: int, model_dir: str, sts_file: str | None, distractors: int | None = None
) -> None:
    from benchmarks.django_setup import setup_django as configure

    sbert = {
        "ENCODERS": {"default": {"MODEL": MODEL, "THREADS": threads, "BATCH_SIZE": 32}},
        "AUTO_EMBED": False,
        "MODEL_DIR": model_dir,
        "TRAINING": {"STS_FILE": sts_file},
    }
    configure(sbert)
    if distractors is not None:
        from django_sbert.finetuning import gate

        gate.EVAL_DISTRACTORS = distractors


def load(rows: int, seed: int, dev_share: float = 0.2, gate_share: float = 0.1) -> dict:
    corpus = {}
    for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        corpus[doc["_id"]] = (doc.get("title", ""), doc["text"])
    queries = {}
    for line in (SCIFACT / "queries-train.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        queries[doc["_id"]] = doc["text"]
    relevant: dict[str, set[str]] = {}
    for line in (SCIFACT / "qrels-train.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0 and did in corpus:
            relevant.setdefault(qid, set()).add(did)
    ids = sorted(q for q in queries if q in relevant)
    random.Random(seed).shuffle(ids)
    n_dev, n_gate = int(len(ids) * dev_share), int(len(ids) * gate_share)
    split = {
        "dev": ids[:n_dev],
        "gate": ids[n_dev : n_dev + n_gate],
        "train": ids[n_dev + n_gate :],
    }
    judged = sorted({d for q in ids for d in relevant[q]})
    others = sorted(set(corpus) - set(judged))
    random.Random(seed).shuffle(others)
    docs = judged + (others if rows <= 0 else others[: max(0, rows - len(judged))])
    return {
        "corpus": {d: corpus[d] for d in docs},
        "queries": queries,
        "relevant": relevant,
        "split": split,
    }


def article_text(title: str, text: str) -> str:
    return f"{title}\n{text}"  # what Article's EmbeddingField(source=("title", "body")) builds


def pairs_jsonl(data: dict) -> str:
    """The pairs file a site would upload: train pairs, and the gate's eval pairs."""
    lines = []
    for part, split in (("train", "train"), ("gate", "eval")):
        for qid in data["split"][part]:
            for did in sorted(data["relevant"][qid]):
                title, text = data["corpus"][did]
                record = {
                    "text_a": data["queries"][qid],
                    "text_b": article_text(title, text),
                    "split": split,
                }
                lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def search_figures(data: dict, pk_of: dict[str, int], method: str = "similar_to") -> dict:
    """nDCG@10 / Recall@10 over the dev queries of ``Article.objects.<method>(query, k=10)``:
    ``similar_to`` (vector) or ``hybrid_search`` (with the fusion the serving version chose,
    or the site's settings before any fine-tune)."""
    search = getattr(article_model().objects, method)
    ndcg, recall = [], []
    doc_of = {pk: did for did, pk in pk_of.items()}
    for qid in measured_queries(data):
        gold = data["relevant"][qid]
        ranked = search(data["queries"][qid], k=10).values_list("pk", flat=True)
        hits = [doc_of[pk] in gold for pk in ranked]
        dcg = sum(1 / math.log2(rank + 1) for rank, hit in enumerate(hits, start=1) if hit)
        idcg = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(gold), 10) + 1))
        ndcg.append(dcg / idcg)
        recall.append(sum(hits) / len(gold))
    return {
        "ndcg@10": 100 * sum(ndcg) / len(ndcg),
        "recall@10": 100 * sum(recall) / len(recall),
        "queries": len(ndcg),
    }


def measured_queries(data: dict) -> list[str]:
    """The held-back claims search is measured on: the dev split, or with ``--dev-share 0``
    (every train claim trains or evaluates) the gate split, which the run never trains on
    but does choose its kept step and fusion by."""
    return data["split"]["dev"] or data["split"]["gate"]


METHODS = ("similar_to", "hybrid_search")


def judged_fusion(data: dict, pk_of: dict[str, int], name: str) -> dict:
    """The measured claims as a site's judgment list, evaluated in hybrid mode as
    ``sbert_evaluate`` does: the settings' fusion on the whole list, and a fusion tuned on
    half of its queries against the settings' on the other half (``metrics["fusion"]``). The
    version's own tuned fusion is set aside (``SEARCH["FUSION"]["TUNED"]`` off), so the gain
    is that of the list's tuning over the defaults."""
    from django.conf import settings
    from django.contrib.contenttypes.models import ContentType
    from django.test import override_settings

    from django_sbert.conf import sbert_settings
    from django_sbert.evaluation import evaluate
    from django_sbert.models import JudgedQuery, Judgment, JudgmentList

    Article = article_model()
    judged = JudgmentList.objects.create(
        name=name, content_type=ContentType.objects.get_for_model(Article), field="embedding"
    )
    relevant: dict[str, set[str]] = {}  # a few claims share their text: one query each
    for qid in measured_queries(data):
        relevant.setdefault(data["queries"][qid], set()).update(data["relevant"][qid])
    for text, docs in relevant.items():
        query = JudgedQuery.objects.create(judgment_list=judged, text=text)
        Judgment.objects.bulk_create(
            Judgment(query=query, object_pk=str(pk_of[did]), grade=1) for did in sorted(docs)
        )
    sbert = settings.SBERT
    search = sbert.get("SEARCH", {})
    search = {**search, "FUSION": {**search.get("FUSION", {}), "TUNED": False}}
    with override_settings(SBERT={**sbert, "SEARCH": search}):
        assert not sbert_settings.SEARCH["FUSION"]["TUNED"]
        [hybrid] = evaluate(judged, modes=["hybrid"], store=False)
    report = hybrid.metrics["fusion"]
    tried = report["list"]
    figures = {
        "settings_ndcg@10": 100 * report["settings"]["ndcg@10"],
        "tuned_fusion": tried["fusion"],
        "tuned_on": tried["tuned_on"],
        "heldout_queries": tried["heldout_queries"],
        "heldout_settings_ndcg@10": 100 * tried["heldout_current_ndcg@10"],
        "heldout_tuned_ndcg@10": 100 * tried["heldout_tuned_ndcg@10"],
        "wins": tried["wins"],
    }
    gain = figures["heldout_tuned_ndcg@10"] - figures["heldout_settings_ndcg@10"]
    print(
        f"{name}: settings' fusion {figures['settings_ndcg@10']:.2f} on the list; tuned on "
        f"{tried['tuned_on']} ({tried['fusion']}): on the "
        f"{tried['heldout_queries']} others {figures['heldout_tuned_ndcg@10']:.2f} against "
        f"{figures['heldout_settings_ndcg@10']:.2f} ({gain:+.2f}; serves: {tried['wins']})"
    )
    return figures


@contextlib.contextmanager
def timed(owner: object, name: str) -> Iterator[list[float]]:
    """Seconds of each call of ``owner.name`` during the block (where a run's time goes)."""
    seconds: list[float] = []
    function = getattr(owner, name)

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the function's own
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    setattr(owner, name, wrapper)
    try:
        yield seconds
    finally:
        setattr(owner, name, function)


def timed_evaluations() -> contextlib.AbstractContextManager[list[float]]:
    """Seconds of each of early stopping's evaluations during the block."""
    from django_sbert.encoder import training

    return timed(training._EarlyStopping, "measure")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="corpus rows (Article); 0: all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dev-share", type=float, default=0.2, help="train queries measured")
    parser.add_argument("--gate-share", type=float, default=0.1, help="the run's eval split")
    parser.add_argument("--sts-file", help="SBERT['TRAINING']['STS_FILE'] (general quality)")
    parser.add_argument(
        "--eval-distractors",
        type=int,
        help="finetuning.gate.EVAL_DISTRACTORS (not given: the default, 1000)",
    )
    # Not given: the default recipe's value (Hyperparameters).
    parser.add_argument("--loss", default="mnrl")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--no-hard-negatives", action="store_true")
    parser.add_argument("--no-early-stopping", action="store_true")
    parser.add_argument(
        "--tolerance", type=float, help="early stopping's tolerance (0: the strict best step)"
    )
    parser.add_argument(
        "--equal-keyword-weights",
        action="store_true",
        help="rank keyword matches with the title weighed as the body, as "
        'keyword_weights={"title": "B", "body": "B"} does (docs/hybrid.md, "Keyword ranking: '
        'BM25")',
    )
    add_json_option(parser)
    args = parser.parse_args()

    wall_started = time.perf_counter()
    model_dir = tempfile.mkdtemp(prefix="sbert-bench-models-")
    setup_django(args.threads, model_dir, args.sts_file, args.eval_distractors)
    from django_sbert import indexing, serving
    from django_sbert.finetuning import execution, pairs, promotion, runs
    from django_sbert.finetuning.execution import execute_run
    from django_sbert.finetuning.options import Hyperparameters
    from django_sbert.models import EncoderVersion, TrainingPair, TrainingRun

    Article = article_model()

    print(cpu_line())
    if args.equal_keyword_weights:
        from django_sbert.keyword import tsquery

        # Weight A's rank multiplier set to B's, as keyword_statistics --equal-weights does.
        tsquery.RANK_WEIGHTS = (*tsquery.RANK_WEIGHTS[:3], tsquery.RANK_WEIGHTS[2])
        print(f"keyword rank multipliers (D, C, B, A): {tsquery.RANK_WEIGHTS}")
    timings: dict[str, float] = {}
    data = load(args.rows, args.seed, args.dev_share, args.gate_share)
    print(
        f"SciFact train queries: {len(data['split']['train'])} train, "
        f"{len(data['split']['gate'])} gate (eval split), {len(data['split']['dev'])} dev; "
        f"corpus {len(data['corpus'])} rows; load average {load_average()}"
    )

    started = time.perf_counter()
    Article.objects.all().delete()
    objs = Article.objects.bulk_create(
        Article(title=title[:300], body=text) for title, text in data["corpus"].values()
    )
    pk_of = {did: obj.pk for did, obj in zip(data["corpus"], objs, strict=True)}
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_stale(ref)
    timings["embed corpus (base)"] = time.perf_counter() - started

    started = time.perf_counter()
    report = pairs.import_pairs(io.StringIO(pairs_jsonl(data)), "jsonl", source="scifact")
    assert report.ok, report.errors[:5]
    timings["import pairs"] = time.perf_counter() - started
    print(f"imported {report.created} pairs")

    before = {method: search_figures(data, pk_of, method) for method in METHODS}
    print(f"before: {before}")
    judged = {"before": judged_fusion(data, pk_of, "judged claims, base model")}

    started = time.perf_counter()
    run = runs.create_run(
        "default",
        list(TrainingPair.objects.values_list("pk", flat=True)),
        hyperparameters=Hyperparameters.from_options(
            args.loss,
            {
                "epochs": args.epochs,
                "batch_size": args.batch_size,
                "learning_rate": args.learning_rate,
                "seed": args.seed,
                "hard_negatives": False if args.no_hard_negatives else None,
                "early_stopping": False if args.no_early_stopping else None,
                "tolerance": args.tolerance,
            },
        ),
        enqueue=False,
    )
    print(f"run {run.pk}: {run.loss} {run.hyperparameters}")
    with timed_evaluations() as evaluations, timed(execution, "mined_examples") as mining:
        status = execute_run(run.pk)
    run = TrainingRun.objects.get(pk=run.pk)
    timings["training run"] = time.perf_counter() - started
    timings["  of which mining hard negatives"] = sum(mining)
    timings["  of which early stopping's evaluations"] = sum(evaluations)
    print(f"{len(evaluations)} evaluations of early stopping: {sum(evaluations):.1f} s")
    if status != "succeeded":
        raise SystemExit(f"run {status}: {run.error}")
    print(f"run: {run.step} of {run.total_steps} steps; gate split before {run.metrics_before}")
    print(f"                          after  {run.metrics_after}")
    if run.evaluations:
        history = ", ".join(f"{s}: {100 * v:.2f}" for s, v in run.evaluations["history"])
        print(f"evaluations ({run.evaluations['metric']} on the gate split): {history}")
        print(
            f"kept step {run.evaluations['best_step']}; stopped early: "
            f"{run.evaluations.get('stopped_early')}; min steps "
            f"{run.evaluations.get('min_steps')}; eval corpus {run.data.get('eval_corpus')}"
        )

    candidate = EncoderVersion.objects.get(run=run)
    started = time.perf_counter()
    try:
        verdict = promotion.start_promotion(candidate, run_now=True)
        print(f"gate: passed ({verdict.describe() if verdict else '-'})")
    except promotion.PromotionRefused as exc:
        raise SystemExit(f"gate refused: {exc}") from None
    timings["promotion (stage + switch)"] = time.perf_counter() - started
    serving.forget_serving()
    assert serving.serving_version("default") == candidate.version

    after = {method: search_figures(data, pk_of, method) for method in METHODS}
    print(f"after:  {after}")
    judged["after"] = judged_fusion(data, pk_of, "judged claims, fine-tuned")
    fusion = {k: v for k, v in (candidate.metrics or {}).items() if k.startswith("fusion_")}
    print(f"the promoted version's fusion (chosen on the gate split): {fusion or 'none'}")
    held_back = "dev" if data["split"]["dev"] else "gate (eval split)"
    print(f"\non the {held_back} queries                  nDCG@10   Recall@10")
    for method in METHODS:
        for label, figures in (
            ("all-MiniLM-L6-v2 (base)", before[method]),
            ("after fine-tune + promotion", after[method]),
        ):
            row = f"{method}, {label}"
            print(f"  {row:<46s}{figures['ndcg@10']:7.2f}   {figures['recall@10']:8.2f}")
    for name, seconds in timings.items():
        print(f"  {name:<32s} {seconds:7.1f} s")
    timings["whole benchmark (wall)"] = time.perf_counter() - wall_started
    print(f"  {'whole benchmark (wall)':<32s} {timings['whole benchmark (wall)']:7.1f} s")
    print(f"load average at the end: {load_average()}")
    write_json(
        args.json,
        {
            "before": before,
            "after": after,
            "fusion": fusion,
            "judged_list_fusion": judged,
            "kept_step": (run.evaluations or {}).get("best_step"),
            "seconds": {k: round(v, 1) for k, v in timings.items()},
        },
    )


if __name__ == "__main__":
    main()
