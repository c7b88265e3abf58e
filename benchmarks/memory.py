"""Process memory over repeated encodes: does RSS stay flat?

    .venv/bin/python benchmarks/memory.py [--model all-MiniLM-L6-v2] [--n 10000] [--repeats 50]
        [--threads 2]

Encodes the same ``--n`` texts ``--repeats`` times and prints the resident set size after the
first encode and after the last, and the largest growth seen in between. Target: growth within
50 MB. Texts are STSb sentences plus long wikinews articles (truncated at 256 tokens), so the
batches take many different shapes, which is what makes allocators grow.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import psutil
import torch
from _data import SHARED, sts_sentences

from django_sbert.encoder import SentenceEncoder


def texts(n: int) -> list[str]:
    articles = []
    with (SHARED / "data/wikinews/wikinews_economy.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            articles.append(f"{row['title']}\n{row['text']}")
    short = sts_sentences(n)
    # One long article in ten, so batches take many different shapes.
    return [articles[i % len(articles)] if i % 10 == 0 else short[i % len(short)] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    encoder = SentenceEncoder.load(args.model)
    data = texts(args.n)
    process = psutil.Process()
    start = time.perf_counter()
    encoder.encode(data)
    gc.collect()
    baseline = peak = process.memory_info().rss
    for repeat in range(2, args.repeats + 1):
        encoder.encode(data)
        gc.collect()
        rss = process.memory_info().rss
        peak = max(peak, rss)
        if repeat % 5 == 0:
            seconds = time.perf_counter() - start
            print(f"encode {repeat}: rss {rss / 2**20:.0f} MB ({seconds:.0f} s)", flush=True)
    final = process.memory_info().rss
    print(
        f"{args.repeats} encodes of {args.n} texts ({args.model}) in "
        f"{time.perf_counter() - start:.0f} s: rss after 1st {baseline / 2**20:.0f} MB, "
        f"after last {final / 2**20:.0f} MB, growth {(final - baseline) / 2**20:+.1f} MB, "
        f"largest {(peak - baseline) / 2**20:+.1f} MB"
    )


if __name__ == "__main__":
    main()
