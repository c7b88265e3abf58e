"""Time of one fine-tuning step of the default recipe, change by change.

Every variant goes through ``fit()`` itself on the same MNRL triples of SciFact (a train claim,
its abstract, another abstract: what a default admin run trains on), batch 16,
all-MiniLM-L6-v2, the same seed, a fixed number of steps. A variant is
``PRECISION:MAX_SEQ_LENGTH:BATCHING``: ``float32`` or ``bfloat16`` (``fit(precision=...)``),
the tokens the training steps read (``fit(max_seq_length=...)``; 256 is MiniLM's own) and
``random`` or ``buckets`` (``fit(length_buckets=...)``). A step's wall time and CPU time (this
process's user + system seconds, which a shared machine disturbs less than the wall clock)
are read from fit's progress reports, the first ``--warmup`` steps left out; each variant
runs ``--repeats`` times, alternating, and the median is reported. ``--eval-texts N`` also
times an evaluation: N abstracts encoded with the model being trained, as early stopping does.

    HF_HUB_OFFLINE=1 python -m benchmarks.train_step [--steps 10] [--repeats 3] [--threads 2] \
        [--variants float32:256:random bfloat16:256:random bfloat16:128:random ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from benchmarks.common import DATA, add_json_option, cpu_line, write_json

SCIFACT = DATA / "scifact"
DEFAULT_VARIANTS = (
    "float32:256:random",  # the recipe before: float32, MiniLM's 256 tokens, random batches
    "bfloat16:256:random",
    "bfloat16:128:random",
    "bfloat16:128:buckets",
)


def triples(count: int, seed: int) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``count`` (claim, relevant abstract, random abstract) triples, and the abstracts."""
    corpus = {}
    for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        corpus[doc["_id"]] = f"{doc.get('title', '')}\n{doc['text']}"
    claims = {}
    for line in (SCIFACT / "queries-train.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        claims[doc["_id"]] = doc["text"]
    rows = []
    for line in (SCIFACT / "qrels-train.tsv").read_text().splitlines()[1:]:
        qid, did, _ = line.split("\t")
        if qid in claims and did in corpus:
            rows.append((claims[qid], corpus[did]))
    rng = random.Random(seed)
    rng.shuffle(rows)
    docs = sorted(corpus.values())
    return [(q, d, rng.choice(docs)) for q, d in rows[:count]], docs


def parse_variant(text: str) -> tuple[str, int, bool]:
    precision, length, batching = text.split(":")
    if precision not in ("float32", "bfloat16") or batching not in ("random", "buckets"):
        raise argparse.ArgumentTypeError(f"variant {text!r}: PRECISION:MAX_SEQ_LENGTH:BATCHING")
    return precision, int(length), batching == "buckets"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--eval-texts", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    add_json_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.training import fit

    print(cpu_line())
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, capability {capability}, {args.threads} threads")
    encoder = SentenceEncoder.load("all-MiniLM-L6-v2")  # float32, eager
    examples, docs = triples(args.steps * args.batch_size, seed=0)
    eval_docs = random.Random(1).sample(docs, args.eval_texts) if args.eval_texts else []
    walls: dict[str, list[float]] = {v: [] for v in args.variants}
    cpus: dict[str, list[float]] = {v: [] for v in args.variants}
    evals: dict[str, list[float]] = {v: [] for v in args.variants}
    for _ in range(args.repeats):
        for variant in args.variants:
            precision, length, buckets = parse_variant(variant)
            reports: list[tuple[float, float]] = []
            timed: list[float] = []

            def evaluator(model, timed=timed) -> float:
                started = time.perf_counter()
                model.encode(eval_docs, batch_size=32)
                timed.append(time.perf_counter() - started)
                return 0.0

            def report(progress, reports=reports) -> None:
                reports.append((time.perf_counter(), time.process_time()))

            fit(
                encoder,
                examples,
                loss="mnrl",
                batch_size=args.batch_size,
                learning_rate=5e-5,
                report_every=1,
                callback=report,
                evaluator=evaluator if eval_docs else None,
                eval_every=10**6 if eval_docs else None,  # before and after the last step
                precision=precision,
                max_seq_length=length,
                length_buckets=buckets,
            )
            # Reports come before the step's evaluation: their gaps are the steps alone.
            pairs = list(zip(reports, reports[1:], strict=False))[args.warmup - 1 :]
            wall = statistics.mean(b[0] - a[0] for a, b in pairs)
            cpu = statistics.mean(b[1] - a[1] for a, b in pairs)
            walls[variant].append(wall)
            cpus[variant].append(cpu)
            evals[variant].extend(timed)
            print(f"  {variant:<24s} wall {wall:6.2f} s/step, CPU {cpu:6.2f} s/step", flush=True)
    base = args.variants[0]
    print(
        f"\nMNRL triples, batch {args.batch_size}, {args.threads} threads, mean of steps "
        f"{args.warmup + 1}-{args.steps}, median of {args.repeats} runs"
    )
    print("  variant                   wall s/step  CPU s/step  CPU vs first  s/evaluation")
    rows = {}
    for variant in args.variants:
        wall, cpu = statistics.median(walls[variant]), statistics.median(cpus[variant])
        ratio = statistics.median(cpus[base]) / cpu
        evaluation = statistics.median(evals[variant]) if evals[variant] else float("nan")
        rows[variant] = {
            "wall s/step": round(wall, 3),
            "cpu s/step": round(cpu, 3),
            "cpu speed-up": round(ratio, 2),
            "s/evaluation": round(evaluation, 3),
        }
        print(f"  {variant:<26s}{wall:10.2f}{cpu:12.2f}{ratio:13.2f}x{evaluation:14.2f}")
    write_json(
        args.json,
        {
            "batch_size": args.batch_size,
            "threads": args.threads,
            "steps": args.steps,
            "repeats": args.repeats,
            "eval_texts": args.eval_texts,
            "variants": rows,
        },
    )


if __name__ == "__main__":
    main()
