"""Does a faster training recipe keep quality? A shortened run per variant, same steps.

The default recipe's data (SciFact train claims split as ``admin_finetune.py`` splits them:
``--dev-share`` held-back claims, the rest trained on, each (claim, abstract) pair with one
hard negative mined by the base model), trained through ``fit()`` for ``--epochs`` at the
recipe's learning rate, batch 16, one seed, without early stopping, once per variant
``MAX_SEQ_LENGTH:BATCHING`` (``fit(max_seq_length=..., length_buckets=...)``); each model is
measured by nDCG@10 / Recall@10 of the held-back claims over the ``--rows`` corpus (every
judged abstract and seeded distractors), encoded at the model's own 256 tokens.

    HF_HUB_OFFLINE=1 python -m benchmarks.train_quality [--epochs 1] [--rows 2000] \
        [--variants 256:random 128:random 128:buckets] [--json PATH]
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.admin_finetune import article_text, load
from benchmarks.common import add_json_option, cpu_line, load_average, write_json

VARIANTS = ("256:random", "128:buckets", "128:random")  # MAX_SEQ_LENGTH:BATCHING


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dev-share", type=float, default=0.5)
    parser.add_argument("--gate-share", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    add_json_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.metrics import VectorCache, retrieval_metrics
    from django_sbert.encoder.mining import mine_hard_negatives
    from django_sbert.encoder.training import autocast, fit, training_precision

    print(cpu_line())
    precision = training_precision("auto")
    data = load(args.rows, args.seed, args.dev_share, args.gate_share)
    corpus = {d: article_text(*data["corpus"][d]) for d in data["corpus"]}
    dev = data["split"]["dev"]
    queries = {q: data["queries"][q] for q in dev}
    relevant = {q: data["relevant"][q] for q in dev}
    pairs = [
        (data["queries"][q], corpus[d])
        for q in data["split"]["train"]
        for d in sorted(data["relevant"][q])
    ]
    print(
        f"{len(pairs)} train pairs, {len(dev)} held-back claims, corpus {len(corpus)}, "
        f"{precision}, {args.threads} threads, load average {load_average()}"
    )
    base = VectorCache(SentenceEncoder.load("all-MiniLM-L6-v2"))  # measured, then mines

    def measure(encoder) -> dict[str, float]:
        with autocast(precision):
            return retrieval_metrics(encoder, queries, corpus, relevant, k=10)

    results = {"base": measure(base)}
    print(f"  base: nDCG@10 {100 * results['base']['ndcg@10']:.2f}", flush=True)
    with autocast(precision):
        triples = mine_hard_negatives(base, pairs, list(corpus.values()))
    print(f"  {len(triples)} triples with a mined negative")
    for variant in args.variants:
        length, batching = variant.split(":")
        started = time.perf_counter()
        result = fit(
            base.encoder,
            triples,
            loss="mnrl",
            epochs=args.epochs,
            batch_size=16,
            learning_rate=args.learning_rate,
            seed=args.seed,
            precision=precision,
            max_seq_length=int(length),
            length_buckets=batching == "buckets",
        )
        seconds = time.perf_counter() - started
        results[variant] = {**measure(result.encoder), "steps": result.steps, "seconds": seconds}
        print(
            f"  {variant}: nDCG@10 {100 * results[variant]['ndcg@10']:.2f}, Recall@10 "
            f"{100 * results[variant]['recall@10']:.2f}, {result.steps} steps, {seconds:.0f} s, "
            f"load average {load_average()}",
            flush=True,
        )
    write_json(args.json, {"epochs": args.epochs, "results": results})


if __name__ == "__main__":
    main()
