"""What batching search queries saves: CPU per query when n queries share one forward pass.

    .venv/bin/python -m benchmarks.query_batch [--paths bfloat16 float32 int8] [--threads 1]

The query server (``manage.py sbert_query_server``) encodes the texts that arrive together in
one pass. This measures what that can save on the CPU at hand, with no server in the way:
all-MiniLM-L6-v2 on each inference path (``bfloat16`` and ``float32`` compiled, as
``COMPILE="auto"`` serves them; ``int8``: dynamic quantization, eager), SciFact train claims
(about 20 tokens), batches of 1 to 16 texts that were never encoded before, the median CPU time
of ``--repeats`` calls per size. A forward pass bound by reading the weights would cost about
the same for 1 and for 8 texts; one bound by arithmetic costs n times as much.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.common import DATA, add_json_option, cpu_line, load_average, write_json

SIZES = (1, 2, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", nargs="+", default=["bfloat16", "float32", "int8"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    add_json_option(parser)
    args = parser.parse_args()
    import torch

    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.paths import cpu_features

    print(cpu_line(), f"load average {load_average()}", flush=True)
    torch.set_num_threads(args.threads)
    claims = [json.loads(line)["text"] for line in (DATA / "scifact/queries-train.jsonl").open()]
    figures: dict[str, dict[int, float]] = {}
    for path in args.paths:
        if path == "bfloat16" and not cpu_features().native_bf16:
            print("bfloat16: skipped, no native bf16 on this CPU", flush=True)
            continue
        model = SentenceEncoder.load(
            "all-MiniLM-L6-v2",
            dtype="bfloat16" if path == "bfloat16" else None,
            quantize="int8" if path == "int8" else None,
            compile=path != "int8",
            threads=args.threads,
        )
        unseen = iter(claims)
        for size in SIZES:  # warm each shape first (compiles, oneDNN's kernel choice)
            model.encode([next(unseen) for _ in range(size)])
        figures[path] = {}
        for size in SIZES:
            seconds = []
            for _ in range(args.repeats):
                batch = [next(unseen) for _ in range(size)]
                started = time.process_time()
                model.encode(batch)
                seconds.append(time.process_time() - started)
            per_query = 1000 * statistics.median(seconds) / size
            figures[path][size] = round(per_query, 2)
        row = ", ".join(f"{size}: {ms:.2f}" for size, ms in figures[path].items())
        print(f"{path}: CPU ms per query by batch size: {row}", flush=True)
    print(f"load average at the end {load_average()}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
