"""Process memory over repeated encodes: does RSS stay flat? And what a warm process holds.

    python -m benchmarks.memory [--model all-MiniLM-L6-v2] [--n 10000] [--repeats 50]
        [--threads 2] [--json PATH]
    python -m benchmarks.memory --role web      # default path, warm, 200 queries
    python -m benchmarks.memory --role worker   # default path, 1,000 batches of 32
        [--batches 1000] [--batch-size 32] [--random-lengths] [--unbucketed]
    flock /tmp/sbert-bench.lock python -m benchmarks.memory --layouts [--rounds 3]
        [--rows 1000] [--light-workers 9] [--workers 2] [--json PATH]

``--layouts`` measures the web layouts of docs/deployment.md as a site runs them (benchmarks/
_site_memory.py): gunicorn with the load test's site, warmed by semantic and hybrid REST
searches, and the host's query server; the RSS (and PSS) of each web process and of the
encoder process, and the host's total for 9 web processes plus the encoder.

``--role`` loads the encoder on the path a web process (``query``) or an encoding worker
(``document``) takes by default (``encoder.paths``), warms it, and prints RSS after warming
and after the queries or batches, and whether the training code (``django_sbert.encoder.
training``, an optimizer) was imported: a web process should not carry it.

Encodes the same ``--n`` texts ``--repeats`` times and prints the resident set size after the
first encode and after the last, and the largest growth seen in between. Target: growth within
50 MB. Texts are STSb sentences plus long wikinews articles (truncated at 256 tokens), so the
batches take many different shapes, which is what makes allocators grow. ``--random-lengths``
feeds texts of every length from 1 to 250 words instead (random words, seeded), and
``--unbucketed`` pads each batch to its longest text rather than to a bucketed width
(``SentenceEncoder.pad_buckets``): the two show what the buckets bound.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time

import psutil
import torch

from benchmarks.common import DATA, add_json_option, cpu_line, write_json
from benchmarks.data import sts_sentences
from django_sbert.encoder import SentenceEncoder


def texts(n: int) -> list[str]:
    articles = []
    with (DATA / "wikinews/wikinews_economy.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            articles.append(f"{row['title']}\n{row['text']}")
    short = sts_sentences(n)
    # One long article in ten, so batches take many different shapes.
    return [articles[i % len(articles)] if i % 10 == 0 else short[i % len(short)] for i in range(n)]


def random_length_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of 1 to 250 random words each: batches of every width up to 256 tokens."""
    rng = random.Random(seed)
    words = [
        "the",
        "of",
        "market",
        "bank",
        "rates",
        "economy",
        "growth",
        "prices",
        "and",
        "to",
        "in",
        "a",
    ]
    return [" ".join(rng.choices(words, k=rng.randint(1, 250))) for _ in range(n)]


def warm_process(
    role: str,
    model: str,
    threads: int,
    batches: int,
    size: int,
    random_lengths: bool = False,
    bucketed: bool = True,
) -> dict:
    import sys

    from django_sbert.encoder.paths import default_path

    process = psutil.Process()
    path = default_path("query" if role == "web" else "document", model)
    dtype = None if path.dtype == "float32" else path.dtype
    encoder = SentenceEncoder.load(model, compile=path.compile, dtype=dtype)
    encoder.pad_buckets = bucketed
    data = random_length_texts(batches * size) if random_lengths else texts(batches * size)
    start = time.perf_counter()
    if role == "web":
        encoder.encode("warm up", threads=1)
        warm = process.memory_info().rss
        for text in data[:200]:
            encoder.encode(text[:200], threads=1)
        what = "200 queries"
    else:
        encoder.encode(["warm up", "a batch of two"])
        encoder.encode("warm up")
        warm = process.memory_info().rss
        for batch in range(batches):
            encoder.encode(data[batch * size : (batch + 1) * size], batch_size=size)
            if (batch + 1) % 200 == 0:
                rss = process.memory_info().rss
                print(f"batch {batch + 1}: rss {rss / 2**20:.0f} MB", flush=True)
        what = f"{batches} batches of {size}"
        what += ", random lengths" if random_lengths else ""
        what += "" if bucketed else ", unbucketed"
    gc.collect()
    final = process.memory_info().rss
    training = sorted(m for m in sys.modules if m.startswith("django_sbert.encoder.training"))
    print(
        f"{role} process ({path.label}, {threads} threads): rss warm {warm / 2**20:.0f} MB, "
        f"after {what} {final / 2**20:.0f} MB ({time.perf_counter() - start:.0f} s); "
        f"training code imported: {training or 'no'}"
    )
    return {
        "role": role,
        "path": path.label,
        "threads": threads,
        "what": what,
        "rss_warm_mb": round(warm / 2**20),
        "rss_after_mb": round(final / 2**20),
        "training_code_imported": training,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--role", choices=["web", "worker"], help="a warm process's RSS")
    parser.add_argument("--batches", type=int, default=1000, help="--role worker: batches")
    parser.add_argument("--batch-size", type=int, default=32, help="--role worker: texts each")
    parser.add_argument("--random-lengths", action="store_true", help="texts of 1-250 words")
    parser.add_argument("--unbucketed", action="store_true", help="pad to the longest text")
    parser.add_argument("--layouts", action="store_true", help="web layouts: RSS of a site")
    parser.add_argument("--rounds", type=int, default=3, help="--layouts: runs (medians)")
    parser.add_argument("--rows", type=int, default=1000, help="--layouts: SciFact rows")
    parser.add_argument("--workers", type=int, default=2, help="--layouts: in-process workers")
    parser.add_argument("--light-workers", type=int, default=9, help="--layouts: light workers")
    parser.add_argument("--port", type=int, default=8785, help="--layouts: first site's port")
    add_json_option(parser)
    args = parser.parse_args()
    if args.layouts:
        from benchmarks._site_memory import measure_layouts

        print(cpu_line(), flush=True)
        write_json(args.json, measure_layouts(args))
        return
    torch.set_num_threads(args.threads)
    print(cpu_line())
    if args.role:
        figures = warm_process(
            args.role,
            args.model,
            args.threads,
            args.batches,
            args.batch_size,
            random_lengths=args.random_lengths,
            bucketed=not args.unbucketed,
        )
        write_json(args.json, figures)
        return
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
    write_json(
        args.json,
        {
            "model": args.model,
            "texts": args.n,
            "encodes": args.repeats,
            "rss_first_mb": round(baseline / 2**20),
            "rss_last_mb": round(final / 2**20),
            "growth_mb": round((final - baseline) / 2**20, 1),
            "largest_growth_mb": round((peak - baseline) / 2**20, 1),
        },
    )


if __name__ == "__main__":
    main()
