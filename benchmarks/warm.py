"""Start-up and version-switch times of the default (compiled) path, with compile counts.

    .venv/bin/python benchmarks/warm.py [--starts 3] [--threads 1]

* **cold start**: a new process (started by this script, ``--starts`` times) imports the
  encoder, loads all-MiniLM-L6-v2 on the path ``encoder.paths`` chooses for a web process and
  encodes its first query; the time is from the moment the process is spawned to the first
  query's vector, and the query after it shows the path is the fast one. The first start on a
  host with an empty Inductor cache compiles; later ones find the generated code on disk
  (``TORCHINDUCTOR_CACHE_DIR``, by default under ``/tmp``), which is the figure that matters
  for a restart, a new web process or an autoscaled host with the cache on its image.
* **version switch**: in one warm process, a fine-tuned version of the same architecture (the
  model with perturbed weights, saved to a temporary directory) is loaded and its first query
  encoded, as a web process does after a promotion; graphs built are counted (0 expected).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from encode import cpu_line

QUERIES = ["central banks raise interest rates", "a new vaccine reduces infections"]


def child(spawned: float, threads: int) -> None:
    """One fresh process: load, first query, second query; prints the three times."""
    import torch

    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.paths import default_path

    torch.set_num_threads(threads)
    imported = time.time()
    path = default_path("query", "all-MiniLM-L6-v2")
    dtype = None if path.dtype == "float32" else path.dtype
    encoder = SentenceEncoder.load("all-MiniLM-L6-v2", compile=path.compile, dtype=dtype)
    loaded = time.time()
    encoder.encode(QUERIES[0])
    first = time.time()
    start = time.perf_counter()
    encoder.encode(QUERIES[1])
    second = time.perf_counter() - start
    print(
        f"RESULT {imported - spawned:.2f} {loaded - spawned:.2f} {first - spawned:.2f} "
        f"{second * 1000:.1f} {path.label.replace(' ', '_')}"
    )


def cold_starts(count: int, threads: int) -> None:
    rows = []
    for index in range(count):
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        spawned = time.time()
        output = subprocess.run(
            [sys.executable, __file__, "--child", str(spawned), "--threads", str(threads)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        line = next(line for line in output.splitlines() if line.startswith("RESULT"))
        imported, loaded, first, second, label = line.split()[1:]
        rows.append((float(imported), float(loaded), float(first), float(second)))
        print(
            f"start {index + 1} ({label.replace('_', ' ')}): torch+encoder imported "
            f"{imported} s, model loaded {loaded} s, first query {first} s after spawn; "
            f"the next query {second} ms",
            flush=True,
        )
    warm = rows[1:] or rows
    print(
        f"cold start with a warm Inductor cache (median of {len(warm)}): first query "
        f"{statistics.median(r[2] for r in warm):.2f} s after spawn, next query "
        f"{statistics.median(r[3] for r in warm):.1f} ms"
    )


def version_switch(threads: int) -> None:
    import torch
    from torch._dynamo.utils import counters

    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.paths import default_path

    torch.set_num_threads(threads)
    path = default_path("query", "all-MiniLM-L6-v2")
    dtype = None if path.dtype == "float32" else path.dtype
    serving = SentenceEncoder.load("all-MiniLM-L6-v2", compile=path.compile, dtype=dtype)
    serving.encode(QUERIES[0])  # the warm process
    tuned = SentenceEncoder.load("all-MiniLM-L6-v2")
    with torch.no_grad():
        for parameter in tuned.transformer.parameters():
            parameter.mul_(1.01)
    directory = Path(tempfile.mkdtemp(prefix="sbert-version-")) / "v2"
    tuned.save(directory)
    times, eager = [], []
    for attempt in range(3):
        graphs = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        version = SentenceEncoder.load(directory, compile=path.compile, dtype=dtype)
        version.encode(QUERIES[attempt % 2])
        times.append(time.perf_counter() - start)
        built = counters["stats"]["unique_graphs"] - graphs
        start = time.perf_counter()
        version.encode(QUERIES[(attempt + 1) % 2])
        eager.append(time.perf_counter() - start)
        print(
            f"switch {attempt + 1}: load + first query {times[-1]:.2f} s, graphs built "
            f"{built}, next query {eager[-1] * 1000:.1f} ms",
            flush=True,
        )
    print(
        f"version switch to first fast query (median of 3): {statistics.median(times):.2f} s "
        f"({path.label})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=3, help="fresh processes to time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a web process)")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.threads)
        return
    print(cpu_line())
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    cold_starts(args.starts, args.threads)
    version_switch(args.threads)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
