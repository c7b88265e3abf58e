"""Quality of truncated (Matryoshka) vectors: the stock model against a Matryoshka fine-tune.

For all-MiniLM-L6-v2 as shipped and for a fine-tune with ``matryoshka`` (inner ``mnrl``, dims
384/256/128) on SciFact train (claim, abstract) pairs, this prints SciFact nDCG@10 (held-out
test queries, the full 5,183-abstract corpus) and STSb test Spearman with the vectors cut to
each of ``--dims`` and re-normalized (``django_sbert.encoder.matryoshka.truncate``, what an
``EmbeddingField(dimensions=...)`` stores).

Nothing is chosen on ../shared/eval: the train queries are split 80/20 by query id (seeded,
as ``benchmarks.finetune`` does); the fine-tune trains on the 80% and its learning rate is
chosen by the mean nDCG@10 over ``--dims`` of the 20% dev queries, ranked in a seeded sample
of ``--dev-corpus`` abstracts (every abstract judged for a dev query, then random others).
Each text is encoded once per model, at full width; the smaller sizes are cut from it.
``--cache`` keeps the stock model's encodings on disk for the next run.

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python -m benchmarks.matryoshka --stage prepare
    HF_HUB_OFFLINE=1 flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.matryoshka \
        --stage measure [--json PATH]

``prepare`` trains and chooses (a few minutes per learning rate on 2 cores) and saves the
chosen fine-tune under ``--workdir``; ``measure`` prints the held-out table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import SHARED, add_json_option, cpu_line, load_average, write_json
from benchmarks.finetune import SciFact, progress_printer, read_sts
from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.matryoshka import truncate
from django_sbert.encoder.metrics import retrieval_metrics, sts_spearman
from django_sbert.encoder.training import fit


class Encodings:
    """Full-width unit vectors of one model, each text encoded once (and kept on disk for the
    stock model); ``at(d)`` gives an encoder-like view whose vectors are cut to ``d``."""

    def __init__(self, encoder: SentenceEncoder, label: str, cache: Path | None) -> None:
        self.encoder = encoder
        self.path = cache / f"{label}.npz" if cache is not None else None
        self.vectors: dict[str, np.ndarray] = {}
        if self.path is not None and self.path.exists():
            stored = np.load(self.path, allow_pickle=False)
            self.vectors = dict(zip(stored["texts"].tolist(), stored["vectors"], strict=True))

    def encode_full(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            encoded = self.encoder.encode(missing, batch_size=batch_size, normalize=True)
            self.vectors.update(zip(missing, np.asarray(encoded, dtype=np.float32), strict=True))
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                texts_all = list(self.vectors)
                np.savez(
                    self.path,
                    texts=np.array(texts_all),
                    vectors=np.stack([self.vectors[t] for t in texts_all]),
                )
        return np.stack([self.vectors[t] for t in texts])

    def at(self, dimensions: int) -> Any:
        outer = self

        class Truncated:
            def encode(
                self, texts: list[str], batch_size: int = 32, normalize: bool = True
            ) -> np.ndarray:
                return truncate(outer.encode_full(list(texts), batch_size), dimensions)

        return Truncated()


def text_key(texts: list[str]) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]


def ndcg(encodings: Encodings, dims: int, queries: dict, corpus: dict, relevant: dict) -> float:
    result = retrieval_metrics(encodings.at(dims), queries, corpus, relevant, k=10)
    return 100 * result["ndcg@10"]


def dev_corpus(data: SciFact, size: int, seed: int) -> dict[str, str]:
    """Every abstract judged for a dev query, then a seeded sample of the others."""
    judged = set().union(*data.dev[1].values())
    others = sorted(set(data.corpus) - judged)
    random.Random(seed).shuffle(others)
    keep = judged | set(others[: max(0, size - len(judged))])
    return {d: t for d, t in data.corpus.items() if d in keep}


def dev_figures(
    encodings: Encodings, data: SciFact, corpus: dict, sts_dev: list, dims: list[int]
) -> dict[str, float]:
    figures: dict[str, float] = {}
    for d in dims:
        queries, relevant = data.dev
        figures[f"dev ndcg@10 {d}"] = ndcg(encodings, d, queries, corpus, relevant)
        figures[f"dev spearman {d}"] = 100 * sts_spearman(encodings.at(d), sts_dev)
    figures["dev ndcg@10 mean"] = float(np.mean([figures[f"dev ndcg@10 {d}"] for d in dims]))
    return figures


def heldout_figures(
    encodings: Encodings, data: SciFact, sts_test: list, dims: list[int]
) -> dict[str, float]:
    figures: dict[str, float] = {}
    queries, relevant = data.test
    for d in dims:
        figures[f"scifact ndcg@10 {d}"] = ndcg(encodings, d, queries, data.corpus, relevant)
        figures[f"stsb spearman {d}"] = 100 * sts_spearman(encodings.at(d), sts_test)
    return figures


def show(label: str, figures: dict[str, float]) -> None:
    print(f"{label}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data", type=Path, default=SHARED / "data")
    parser.add_argument("--eval", type=Path, default=SHARED / "eval")
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 256, 128])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--learning-rates",
        type=float,
        nargs="+",
        default=[2e-5, 5e-5],
        help="candidates; the one with the best mean dev nDCG@10 over --dims is reported",
    )
    parser.add_argument("--dev-corpus", type=int, default=1000, help="abstracts the dev ranks")
    parser.add_argument(
        "--train-pairs", type=int, default=None, help="train on the first N pairs (a smoke test)"
    )
    parser.add_argument(
        "--max-corpus", type=int, default=None, help="rank a sample of the corpus (a smoke test)"
    )
    parser.add_argument("--cache", type=Path, default=Path("var/matryoshka-cache"))
    parser.add_argument(
        "--stage",
        choices=("prepare", "measure", "all"),
        default="all",
        help="prepare: fine-tune and choose on dev (heavy, not a measurement: run it niced, "
        "without the lock); measure: the held-out figures (under the lock)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("var/matryoshka"), help="the chosen fine-tune"
    )
    add_json_option(parser)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    print(cpu_line(), flush=True)
    print(f"load average at start: {load_average()}", flush=True)
    started = time.perf_counter()
    data = SciFact(args.data / "scifact", args.eval / "scifact", args.seed, args.max_corpus)
    print(
        f"model {args.model}, torch threads {torch.get_num_threads()}, "
        f"{len(data.train_pairs)} train pairs, {len(data.dev[0])} dev queries, "
        f"{len(data.test[0])} test queries in {len(data.corpus)} abstracts",
        flush=True,
    )
    results: dict[str, Any] = {"dims": args.dims}
    if args.stage in ("prepare", "all"):
        results |= prepare(args, data)
    if args.stage in ("measure", "all"):
        results |= measure(args, data)
    results["seconds"] = time.perf_counter() - started
    print(f"\ntook {results['seconds']:.0f}s", flush=True)
    print(f"load average at end: {load_average()}", flush=True)
    write_json(args.json, results)


def prepare(args: argparse.Namespace, data: SciFact) -> dict[str, Any]:
    """Fine-tune with each learning rate, keep the best on the dev split (saved to
    ``--workdir``): nothing here reads ../shared/eval."""
    base = SentenceEncoder.load(args.model)
    corpus = dev_corpus(data, args.dev_corpus, args.seed)
    sts_dev = read_sts(args.data / "stsbenchmark" / "sts-dev.csv")
    print(f"dev: {len(data.dev[0])} queries ranking {len(corpus)} abstracts", flush=True)
    results: dict[str, Any] = {}
    stock = Encodings(base, "stock-dev", None)
    results["stock dev"] = dev_figures(stock, data, corpus, sts_dev, args.dims)
    show("stock, dev", results["stock dev"])
    best: tuple[float, float, SentenceEncoder] | None = None
    for lr in args.learning_rates:
        t0 = time.perf_counter()
        fitted = fit(
            base,
            data.train_pairs[: args.train_pairs],
            loss="matryoshka",
            loss_options={"inner": "mnrl", "dims": args.dims},
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=lr,
            seed=args.seed,
            callback=progress_printer(f"matryoshka lr {lr:g}"),
        )
        seconds = time.perf_counter() - t0
        tuned = Encodings(fitted.encoder, f"matryoshka-lr{lr:g}", None)
        figures = {**dev_figures(tuned, data, corpus, sts_dev, args.dims), "train s": seconds}
        results[f"matryoshka lr {lr:g} dev"] = figures
        show(f"matryoshka lr {lr:g} ({fitted.steps} steps), dev", figures)
        if best is None or figures["dev ndcg@10 mean"] > best[0]:
            best = (figures["dev ndcg@10 mean"], lr, fitted.encoder)
    assert best is not None
    _, chosen_lr, chosen = best
    results["chosen learning rate"] = chosen_lr
    print(f"chosen on dev: learning rate {chosen_lr:g}", flush=True)
    chosen.save(args.workdir / "model")
    (args.workdir / "chosen.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def measure(args: argparse.Namespace, data: SciFact) -> dict[str, Any]:
    """Held-out figures of the stock model and of the fine-tune ``prepare`` chose."""
    chosen = json.loads((args.workdir / "chosen.json").read_text())
    sts_test = read_sts(args.eval / "stsbenchmark" / "sts-test.csv")
    stock = Encodings(
        SentenceEncoder.load(args.model),
        f"stock-{args.model}-{text_key(list(data.corpus.values()))}",
        args.cache,
    )
    tuned = Encodings(SentenceEncoder.load(args.workdir / "model"), "matryoshka", None)
    results: dict[str, Any] = {"chosen learning rate": chosen["chosen learning rate"]}
    results["stock held-out"] = heldout_figures(stock, data, sts_test, args.dims)
    show("stock, held-out", results["stock held-out"])
    results["matryoshka held-out"] = heldout_figures(tuned, data, sts_test, args.dims)
    lr = chosen["chosen learning rate"]
    show(f"matryoshka (lr {lr:g}), held-out", results["matryoshka held-out"])
    print("\n| model | dims | SciFact nDCG@10 | STSb Spearman |")
    print("|---|---:|---:|---:|")
    for name, key in ((args.model, "stock"), (f"Matryoshka fine-tune (lr {lr:g})", "matryoshka")):
        figures = results[f"{key} held-out"]
        for d in args.dims:
            print(
                f"| {name} | {d} | {figures[f'scifact ndcg@10 {d}']:.2f} | "
                f"{figures[f'stsb spearman {d}']:.2f} |"
            )
    return results


if __name__ == "__main__":
    main()
