"""Measure what fine-tuning all-MiniLM-L6-v2 with ``fit()`` gains (and costs).

Parts (run all, or some with ``--only``):

* ``stsb``    fine-tune on STSb train (scores / 5), 1 epoch (``--sts-epochs``), lr 2e-5
              (``--sts-lr``), batch 16, with ``cosine`` and
              ``cosent``; STSb dev Spearman before and after, and the wall time.
* ``scifact`` fine-tune with ``mnrl`` on (query, relevant abstract) pairs of 80% of the SciFact
              train queries; nDCG@10 / Recall@10 on the other 20% (the dev split), before and
              after, ranking the whole corpus. ``--dev-share 0.5`` splits them in halves;
              ``--early-stopping`` holds ``--eval-share`` of the train queries apart as the
              eval split (what a run's eval pairs are) and keeps the best step on it;
              several ``--mnrl-lr`` values (and ``--variant`` loss options) train one model
              each from one mining pass; ``--train-queries`` trains on fewer queries;
              ``--mining-top-k 50`` mines negatives among the 50 best-ranked texts only (the
              default looks down the whole ranking); ``--scifact-from-adapt`` (with ``--only
              adapt scifact``) trains from the adapt part's model instead of the base.
* ``simcse``  unsupervised SimCSE on SciFact abstracts alone; the same retrieval figures.
* ``adapt``   "adapt to our content" with pseudo-queries cut from the SciFact abstracts alone
              (``--adapt-method ict``: a sentence against the rest of its abstract; ``crop``:
              two random spans): ``margin_mse`` on the margins of a teacher fusing the base
              model with BM25 (``--adapt-dense-share``), or ``--adapt-loss mnrl`` on the pairs
              (optionally with negatives mined by the base model among the pairs'
              positives); the same retrieval figures and STSb dev Spearman (general quality
              kept?). No claim is used for training.
* ``general`` fine-tune with ``mnrl`` on 300 SciFact train pairs with the default settings,
              then STSb dev Spearman: a small domain fine-tune must not wreck general quality.

Nothing is chosen by the held-out sets in ../shared/eval; ``--heldout`` only prints them too.

    HF_HUB_OFFLINE=1 python -m benchmarks.finetune --only stsb [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import SHARED, add_json_option, cpu_line, load_average, write_json
from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.distillation import DENSE_SHARE, PER_QUERY, lexical_teacher_examples
from django_sbert.encoder.metrics import retrieval_metrics, sts_spearman
from django_sbert.encoder.mining import mine_hard_negatives
from django_sbert.encoder.pseudo_queries import pseudo_pairs
from django_sbert.encoder.training import Progress, fit

PARTS = ("stsb", "scifact", "simcse", "adapt", "general")


# ------------------------------------------------------------------------------ data
def read_sts(path: Path, scale: float = 1.0) -> list[tuple[str, str, float]]:
    """STSb rows: split on tabs (sentences hold bare quotes), take score, sentence1, sentence2."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cols = line.split("\t")
        if len(cols) >= 7:
            pairs.append((cols[5], cols[6], float(cols[4]) / scale))
    return pairs


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_qrels(path: Path) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            relevant.setdefault(qid, set()).add(did)
    return relevant


class SciFact:
    """Corpus, train queries split into train/dev by query id (seeded), held-out test."""

    def __init__(
        self,
        data: Path,
        eval_dir: Path,
        seed: int,
        max_corpus: int | None,
        dev_share: float = 0.2,
        eval_share: float = 0.0,
        train_queries: int | None = None,
    ) -> None:
        corpus = {
            d["_id"]: f"{d['title']} {d['text']}".strip() for d in read_jsonl(data / "corpus.jsonl")
        }
        queries = {q["_id"]: q["text"] for q in read_jsonl(data / "queries-train.jsonl")}
        qrels = read_qrels(data / "qrels-train.tsv")
        documents = list(corpus.values())
        ids = sorted(q for q in queries if q in qrels)
        random.Random(seed).shuffle(ids)
        n_dev = len(ids) // 5 if dev_share == 0.2 else int(len(ids) * dev_share)
        dev_ids = set(ids[:n_dev])
        rest = [q for q in ids if q not in dev_ids]
        eval_ids = set(rest[: int(len(rest) * eval_share)])  # the run's eval split, if any
        train_ids = [q for q in rest if q not in eval_ids][:train_queries]  # rest is shuffled
        self.train_pairs = [(queries[q], corpus[d]) for q in train_ids for d in sorted(qrels[q])]
        self.train_queries = len(train_ids)
        self.eval_pairs = [(queries[q], corpus[d]) for q in rest if q in eval_ids for d in qrels[q]]
        self.dev = ({q: queries[q] for q in dev_ids}, {q: qrels[q] for q in dev_ids})
        test_queries = {q["_id"]: q["text"] for q in read_jsonl(eval_dir / "queries-test.jsonl")}
        self.test = (test_queries, read_qrels(eval_dir / "qrels-test.tsv"))
        if max_corpus is not None and max_corpus < len(corpus):
            # Keep every judged document, fill up with a seeded sample of the others.
            judged = set().union(*self.dev[1].values(), *self.test[1].values())
            others = sorted(set(corpus) - judged)
            random.Random(seed).shuffle(others)
            keep = judged | set(others[: max(0, max_corpus - len(judged))])
            corpus = {d: t for d, t in corpus.items() if d in keep}
        self.corpus = corpus
        self.documents = documents  # every abstract, whatever --max-corpus ranks


# ------------------------------------------------------------------------------ helpers
def progress_printer(label: str) -> Any:
    def report(p: Progress) -> None:
        print(
            f"  [{label}] step {p.step}/{p.total_steps} loss {p.loss:.4f} "
            f"lr {p.learning_rate:.2e} {p.seconds_elapsed:.0f}s in, ~{p.seconds_left:.0f}s left",
            file=sys.stderr,
            flush=True,
        )

    return report


def retrieval(encoder: SentenceEncoder, data: SciFact, heldout: bool) -> dict[str, float]:
    """nDCG@10 / Recall@10 on the dev split (and the test queries), one corpus encoding."""
    queries = {f"dev:{q}": t for q, t in data.dev[0].items()}
    relevant = {f"dev:{q}": r for q, r in data.dev[1].items()}
    if heldout:
        queries |= {f"test:{q}": t for q, t in data.test[0].items()}
        relevant |= {f"test:{q}": r for q, r in data.test[1].items()}
    result = retrieval_metrics(encoder, queries, data.corpus, relevant, k=10, batch_size=32)
    figures: dict[str, float] = {}
    for split in ("dev", "test") if heldout else ("dev",):
        rows = [m for q, m in result["per_query"].items() if q.startswith(split + ":")]
        for name in ("ndcg@10", "recall@10", "mrr@10"):
            figures[f"{split} {name}"] = 100 * sum(m[name] for m in rows) / len(rows)
    return figures


def show(label: str, figures: dict[str, float]) -> None:
    shown = ", ".join(f"{k} {v:.2f}" for k, v in figures.items() if v is not None)
    print(f"{label}: {shown}", flush=True)


# ------------------------------------------------------------------------------ parts
def run_stsb(base: SentenceEncoder, args: argparse.Namespace, results: dict) -> None:
    train = read_sts(args.data / "stsbenchmark" / "sts-train.csv", scale=5.0)
    dev = read_sts(args.data / "stsbenchmark" / "sts-dev.csv")
    test = read_sts(args.eval / "stsbenchmark" / "sts-test.csv") if args.heldout else None

    def evaluate(encoder: SentenceEncoder) -> dict[str, float]:
        figures = {"dev spearman": 100 * sts_spearman(encoder, dev)}
        if test:
            figures["test spearman"] = 100 * sts_spearman(encoder, test)
        return figures

    results["stsb before"] = evaluate(base)
    show("STSb before", results["stsb before"])
    for loss in args.sts_losses:
        started, cpu = time.perf_counter(), time.process_time()
        fitted = fit(
            base,
            train,
            loss=loss,
            epochs=args.sts_epochs,
            batch_size=args.batch_size,
            learning_rate=args.sts_lr,
            seed=args.seed,
            callback=progress_printer(loss),
            report_every=50,
        )
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        figures = {
            **evaluate(fitted.encoder),
            "train seconds": wall,
            "train cpu seconds": cpu,
            "steps": fitted.steps,
        }
        results[f"stsb after {loss}"] = figures
        show(
            f"STSb after {loss} ({len(train)} pairs, {args.sts_epochs} epoch(s), lr "
            f"{args.sts_lr:g}, batch {args.batch_size})",
            figures,
        )


def eval_split_ndcg(pairs: list[tuple[str, str]]) -> Any:
    """What a training run's early stopping measures: nDCG@10 of the eval pairs' queries over
    the eval pairs' documents (``finetuning.gate.eval_metrics``)."""
    relevant: dict[str, set[str]] = {}
    for query, doc in pairs:
        relevant.setdefault(query, set()).add(doc)
    queries = {q: q for q in relevant}
    corpus = {d: d for _, d in pairs}

    def evaluate(encoder: SentenceEncoder) -> float:
        return retrieval_metrics(encoder, queries, corpus, relevant, k=10)["ndcg@10"]

    return evaluate


def run_scifact(
    base: SentenceEncoder,
    data: SciFact,
    args: argparse.Namespace,
    results: dict,
    start: SentenceEncoder | None = None,
) -> None:
    """``start``: train from this encoder (the adapt part's, ``--scifact-from-adapt``) instead
    of ``base``; "before" stays the base model's figures."""
    before = results.get("scifact before") or retrieval(base, data, args.heldout)
    results["scifact before"] = before
    show(f"SciFact before ({len(data.corpus)} docs)", before)
    origin = base if start is None else start  # what mines and trains
    examples: list[tuple[str, ...]] = list(data.train_pairs)
    started = time.perf_counter()
    if args.hard_negatives:
        # Mined by the model trained from, over the corpus texts (no labels beyond the pairs').
        examples = mine_hard_negatives(
            origin,
            data.train_pairs,
            list(data.corpus.values()),
            negatives=args.negatives,
            top_k=args.mining_top_k or None,
        )
        print(f"  hard negatives for {len(examples)} of {len(data.train_pairs)} pairs", flush=True)
    print(f"  {data.train_queries} train queries, {len(data.train_pairs)} pairs", flush=True)
    mining = time.perf_counter() - started
    dev = read_sts(args.data / "stsbenchmark" / "sts-dev.csv")
    variants = args.variant or [{}]
    for lr, variant in [(lr, v) for lr in args.mnrl_lr for v in variants]:
        started, cpu = time.perf_counter(), time.process_time()
        stopping: dict[str, Any] = {}
        if args.early_stopping:
            stopping = {
                "evaluator": eval_split_ndcg(data.eval_pairs),
                "eval_every": args.eval_every,
                "patience": args.patience,
            }
        fitted = fit(
            origin,
            examples,
            loss=args.mnrl_loss,
            epochs=args.mnrl_epochs,
            batch_size=args.batch_size,
            learning_rate=lr,
            seed=args.seed,
            callback=progress_printer(f"mnrl lr {lr:g}"),
            loss_options=dict(args.loss_option or []) | variant,
            **stopping,
        )
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        figures = {
            **retrieval(fitted.encoder, data, args.heldout),
            "stsb dev spearman": 100 * sts_spearman(fitted.encoder, dev),  # general quality
            "train seconds": wall,
            "train cpu seconds": cpu,
            "mining seconds": mining,
            "steps": fitted.steps,
        }
        if args.early_stopping:
            figures |= {"best step": fitted.best_step, "of steps": fitted.total_steps}
            history = ", ".join(f"{s}: {100 * v:.2f}" for s, v in fitted.history)
            print(f"  eval split nDCG@10 by step ({len(data.eval_pairs)} pairs): {history}")
        options = f" {json.dumps(variant, separators=(',', ':'))}" if variant else ""
        results[f"scifact after mnrl lr {lr:g}{options}"] = figures
        negatives = f", {args.negatives} hard negative(s)" if args.hard_negatives else ""
        stop = f", early stopping (patience {args.patience})" if args.early_stopping else ""
        show(
            f"SciFact after {args.mnrl_loss}{options} ({len(examples)} pairs{negatives}, "
            f"{args.mnrl_epochs} epoch(s), lr {lr:g}, batch {args.batch_size}{stop})",
            figures,
        )


def run_simcse(
    base: SentenceEncoder, data: SciFact, args: argparse.Namespace, results: dict
) -> None:
    if not args.no_before:
        before = results.get("scifact before") or retrieval(base, data, args.heldout)
        results["scifact before"] = before
        show(f"SciFact before ({len(data.corpus)} docs)", before)
    texts = sorted(data.corpus.values())
    if args.simcse_unit == "sentence":
        # SimCSE's own unit (the paper trains on Wikipedia sentences), and 4-5x cheaper per
        # text than a whole abstract at 256 tokens.
        texts = sorted({s for t in texts for s in re.split(r"(?<=[.!?])\s+", t) if len(s) > 30})
    random.Random(args.seed).shuffle(texts)
    texts = texts[: args.simcse_texts]
    started, cpu = time.perf_counter(), time.process_time()
    fitted = fit(
        base,
        texts,
        loss="simcse",
        epochs=1,
        batch_size=args.batch_size,
        learning_rate=args.simcse_lr,
        seed=args.seed,
        callback=progress_printer("simcse"),
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    figures = {
        **retrieval(fitted.encoder, data, args.heldout),
        "train seconds": wall,
        "train cpu seconds": cpu,
        "steps": fitted.steps,
    }
    results["scifact after simcse"] = figures
    show(f"SciFact after simcse ({len(texts)} {args.simcse_unit}s, lr {args.simcse_lr:g})", figures)


def run_adapt(
    base: SentenceEncoder, data: SciFact, args: argparse.Namespace, results: dict
) -> SentenceEncoder:
    if not args.no_before:
        before = results.get("scifact before") or retrieval(base, data, args.heldout)
        results["scifact before"] = before
        show(f"SciFact before ({len(data.corpus)} docs)", before)
    dev = read_sts(args.data / "stsbenchmark" / "sts-dev.csv")
    if not args.no_before:
        results["stsb dev before"] = 100 * sts_spearman(base, dev)
        print(f"STSb dev before: {results['stsb dev before']:.2f}", flush=True)
    documents = sorted(data.documents)  # all abstracts, titles included; no claim
    random.Random(args.seed).shuffle(documents)
    documents = documents[: args.adapt_docs]
    built = pseudo_pairs(documents, method=args.adapt_method, seed=args.seed)
    pairs = [(p.query, p.positive) for p in built.pairs]
    print(
        f"  {len(pairs)} {args.adapt_method} pairs from {len(documents)} abstracts "
        f"({len(built.too_short)} too short to split)",
        flush=True,
    )
    started, cpu = time.perf_counter(), time.process_time()
    examples: list[tuple[Any, ...]] = list(pairs)
    if args.adapt_loss == "margin_mse":
        # The teacher fuses the base model's cosines with BM25 over the pairs' own passages.
        examples = lexical_teacher_examples(
            base,
            pairs,
            dense_share=args.adapt_dense_share,
            per_query=args.adapt_per_query,
            seed=args.seed,
        )
        margins = sum(len(e[-1]) for e in examples)
        print(
            f"  {margins} teacher margins in {len(examples)} examples "
            f"(dense share {args.adapt_dense_share:g})"
        )
    elif args.adapt_negatives:
        # Mined by the base model among the pairs' own positives (no label of any kind).
        examples = mine_hard_negatives(base, pairs, [p for _, p in pairs])
        print(f"  hard negatives for {len(examples)} of {len(pairs)} pairs", flush=True)
    fitted = fit(
        base,
        examples,
        loss=args.adapt_loss,
        epochs=args.adapt_epochs,
        batch_size=args.adapt_batch_size or args.batch_size,
        learning_rate=args.adapt_lr,
        seed=args.seed,
        callback=progress_printer(args.adapt_method),
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    figures = {
        **retrieval(fitted.encoder, data, args.heldout),
        "stsb dev spearman": 100 * sts_spearman(fitted.encoder, dev),
        "train seconds": wall,
        "train cpu seconds": cpu,
        "steps": fitted.steps,
    }
    label = f"adapt {args.adapt_method} {args.adapt_loss}"
    if args.adapt_loss == "margin_mse":
        label += f" dense share {args.adapt_dense_share:g}, {args.adapt_per_query} margins a query"
    elif args.adapt_negatives:
        label += " negatives"
    results[f"scifact after {label}"] = figures
    show(
        f"SciFact after {label} ({len(examples)} pairs, {args.adapt_epochs} epoch(s), "
        f"lr {args.adapt_lr:g}, batch {args.adapt_batch_size or args.batch_size})",
        figures,
    )
    return fitted.encoder


def run_general(
    base: SentenceEncoder, data: SciFact, args: argparse.Namespace, results: dict
) -> None:
    dev = read_sts(args.data / "stsbenchmark" / "sts-dev.csv")
    before = results.get("stsb before", {}).get("dev spearman")
    if before is None and not args.no_before:
        before = 100 * sts_spearman(base, dev)
    pairs = list(data.train_pairs)
    random.Random(args.seed).shuffle(pairs)
    started, cpu = time.perf_counter(), time.process_time()
    fitted = fit(base, pairs[:300], loss="mnrl", seed=args.seed, callback=progress_printer("300"))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    after = 100 * sts_spearman(fitted.encoder, dev)
    results["general"] = {
        "dev spearman before": before,
        "dev spearman after": after,
        "change": after - before if before is not None else None,
        "train seconds": wall,
        "train cpu seconds": cpu,
    }
    show("STSb dev after an mnrl fine-tune on 300 SciFact pairs (defaults)", results["general"])


def json_or_text(value: str) -> Any:
    """A command-line value: JSON (``32``, ``5.0``, ``["a", "b"]``) or else the text itself."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data", type=Path, default=SHARED / "data")
    parser.add_argument("--eval", type=Path, default=SHARED / "eval")
    parser.add_argument("--heldout", action="store_true", help="also print held-out test figures")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sts-losses", nargs="+", default=["cosine", "cosent"])
    parser.add_argument("--sts-lr", type=float, default=2e-5)
    parser.add_argument("--sts-epochs", type=int, default=1)
    parser.add_argument("--mnrl-epochs", type=int, default=1)
    parser.add_argument("--mnrl-lr", type=float, nargs="+", default=[2e-5])
    parser.add_argument("--mnrl-loss", default="mnrl", help="mnrl or cached_mnrl")
    parser.add_argument(
        "--loss-option",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        type=json_or_text,
        help="a loss option, its value JSON or a plain word, e.g. --loss-option mini_batch_size "
        '32, --loss-option directions \'["query_to_doc", "doc_to_query"]\'',
    )
    parser.add_argument(
        "--variant",
        action="append",
        type=json.loads,
        metavar="JSON",
        help="scifact: train once more with these loss options on top (repeatable; one mining "
        "pass for all), e.g. --variant '{}' --variant "
        '\'{"hardness_mode": "hard_negatives", "hardness_strength": 5}\'',
    )
    parser.add_argument("--dev-share", type=float, default=0.2, help="train queries for dev")
    parser.add_argument(
        "--train-queries",
        type=int,
        default=None,
        help="train on the pairs of this many of the remaining train queries (a seeded sample; "
        "the dev split stays the same): how the gain grows with the labelled data",
    )
    parser.add_argument(
        "--early-stopping",
        action="store_true",
        help="hold --eval-share of the train queries apart and keep the best step on them",
    )
    parser.add_argument("--eval-share", type=float, default=0.2)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--patience", type=int, default=None)
    parser.add_argument(
        "--hard-negatives", action="store_true", help="mnrl with one mined hard negative per pair"
    )
    parser.add_argument(
        "--negatives", type=int, default=1, help="--hard-negatives: how many per pair"
    )
    parser.add_argument(
        "--mining-top-k",
        type=int,
        default=0,
        help="--hard-negatives: the best-ranked texts a negative is looked for in (0, the "
        "default: the whole ranking, as mine_hard_negatives does)",
    )
    parser.add_argument("--simcse-texts", type=int, default=640, help="texts to train on")
    parser.add_argument("--simcse-unit", choices=("sentence", "abstract"), default="sentence")
    parser.add_argument("--simcse-lr", type=float, default=2e-5)
    parser.add_argument("--adapt-method", choices=("ict", "crop"), default="ict")
    parser.add_argument("--adapt-docs", type=int, default=1000, help="abstracts to cut pairs from")
    parser.add_argument("--adapt-epochs", type=int, default=1)
    parser.add_argument("--adapt-lr", type=float, default=2e-5)
    parser.add_argument(
        "--adapt-batch-size", type=int, default=None, help="adapt's batch (default --batch-size)"
    )
    parser.add_argument(
        "--adapt-loss",
        choices=("mnrl", "margin_mse"),
        default="mnrl",
        help="margin_mse: margins of a teacher fusing the base model with BM25; mnrl: the "
        "pseudo-pairs as positives (with --adapt-negatives, a mined negative each)",
    )
    parser.add_argument(
        "--adapt-dense-share",
        type=float,
        default=DENSE_SHARE,
        help="margin_mse: the teacher's weight on the base model's cosine (the rest is BM25)",
    )
    parser.add_argument(
        "--adapt-per-query",
        type=int,
        default=PER_QUERY,
        help="margin_mse: margins per pseudo-query, each of its own passage over another "
        "candidate drawn at random (one example per pseudo-query holds them all)",
    )
    parser.add_argument(
        "--adapt-negatives", action="store_true", help="mine a hard negative per pseudo-pair"
    )
    parser.add_argument(
        "--max-corpus",
        type=int,
        default=None,
        help="rank a seeded sample of this many abstracts: every document judged for a dev or "
        "test query, then random others (the full corpus takes ~4 min per pass on 2 idle cores)",
    )
    parser.add_argument(
        "--no-before",
        action="store_true",
        help="skip the before-training figures of simcse, adapt and general (another run "
        "printed them)",
    )
    parser.add_argument(
        "--scifact-from-adapt",
        action="store_true",
        help="with --only adapt scifact: the scifact part trains from the adapted model "
        "(adapt to the content first, then learn from the labelled pairs)",
    )
    add_json_option(parser)
    args = parser.parse_args()

    print(cpu_line(), flush=True)
    torch.set_num_threads(args.threads)
    base = SentenceEncoder.load(args.model)
    print(
        f"model {args.model}, torch threads {torch.get_num_threads()}, parts {args.only}, "
        f"load average {load_average()}",
        flush=True,
    )
    results: dict[str, Any] = {}
    needs_scifact = {"scifact", "simcse", "adapt", "general"} & set(args.only)
    data = (
        SciFact(
            args.data / "scifact",
            args.eval / "scifact",
            args.seed,
            args.max_corpus,
            dev_share=args.dev_share,
            eval_share=args.eval_share if args.early_stopping else 0.0,
            train_queries=args.train_queries,
        )
        if needs_scifact
        else None
    )
    if args.scifact_from_adapt and not {"adapt", "scifact"} <= set(args.only):
        parser.error("--scifact-from-adapt needs --only adapt scifact")
    if args.scifact_from_adapt and args.only.index("adapt") > args.only.index("scifact"):
        args.only.remove("adapt")
        args.only.insert(0, "adapt")  # the scifact part starts from its result
    adapted = None
    for part in args.only:
        started = time.perf_counter()
        if part == "stsb":
            run_stsb(base, args, results)
        elif part == "scifact":
            run_scifact(base, data, args, results, adapted if args.scifact_from_adapt else None)
        elif part == "simcse":
            run_simcse(base, data, args, results)
        elif part == "adapt":
            adapted = run_adapt(base, data, args, results)
        else:
            run_general(base, data, args, results)
        print(f"({part} took {time.perf_counter() - started:.0f}s)", flush=True)
    print(f"load average at the end: {load_average()}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
