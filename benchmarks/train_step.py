"""Time of one fine-tuning step and of one evaluation, float32 against bf16 autocast.

Both go through ``fit()`` itself (``precision="float32"`` / ``"bfloat16"``): MNRL triples of
SciFact (a train claim, its abstract, another abstract; what a default admin run trains on),
batch 16, all-MiniLM-L6-v2. A step's time is read from fit's progress reports (the first
``--warmup`` steps left out); an evaluation encodes ``--eval-texts`` abstracts with the model
being trained, as the early-stopping evaluator does. Runs alternate so machine noise hits both.

    HF_HUB_OFFLINE=1 python -m benchmarks.train_step [--steps 12] [--threads 2] [--json PATH]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--eval-texts", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
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
    eval_docs = random.Random(1).sample(docs, args.eval_texts)
    steps: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    evals: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    for _ in range(args.repeats):
        for precision in steps:
            reports: list[float] = []
            timed: list[float] = []

            def evaluator(model, timed=timed) -> float:
                started = time.perf_counter()
                model.encode(eval_docs, batch_size=32)
                timed.append(time.perf_counter() - started)
                return 0.0

            fit(
                encoder,
                examples,
                loss="mnrl",
                batch_size=args.batch_size,
                learning_rate=5e-5,
                report_every=1,
                callback=lambda p, reports=reports: reports.append(p.seconds_elapsed),
                evaluator=evaluator,
                eval_every=10**6,  # before training and after the last step: two evaluations
                precision=precision,
            )
            # Reports come before the step's evaluation: their gaps are the steps alone.
            times = [b - a for a, b in zip(reports, reports[1:], strict=False)]
            steps[precision].extend(times[args.warmup - 1 :])
            evals[precision].extend(timed)
    print(
        f"\nMNRL triples, batch {args.batch_size}, {args.threads} threads    "
        "s/step (median)   s/evaluation of "
        f"{args.eval_texts} abstracts (median)"
    )
    for precision in steps:
        print(
            f"  {precision:<36s}{statistics.median(steps[precision]):8.2f}"
            f"{statistics.median(evals[precision]):22.2f}"
        )
    step_ratio = statistics.median(steps["float32"]) / statistics.median(steps["bfloat16"])
    eval_ratio = statistics.median(evals["float32"]) / statistics.median(evals["bfloat16"])
    print(f"  bf16 speed-up: {step_ratio:.2f}x per step, {eval_ratio:.2f}x per evaluation")
    write_json(
        args.json,
        {
            "batch_size": args.batch_size,
            "threads": args.threads,
            "eval_texts": args.eval_texts,
            **{
                f"{precision} s/step": round(statistics.median(steps[precision]), 3)
                for precision in steps
            },
            **{
                f"{precision} s/evaluation": round(statistics.median(evals[precision]), 3)
                for precision in evals
            },
            "bf16 speed-up per step": round(step_ratio, 2),
            "bf16 speed-up per evaluation": round(eval_ratio, 2),
        },
    )


if __name__ == "__main__":
    main()
