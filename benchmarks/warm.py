"""Start-up and version-switch times of the default (compiled) path, with compile counts.

    python -m benchmarks.warm [--starts 3] [--cold-starts 2] [--threads 1] [--json PATH]

* **cold start**: a new process (started by this script) imports the encoder, loads
  all-MiniLM-L6-v2 on the path ``encoder.paths`` chooses for a web process and encodes its
  first query; the time is from the moment the process is spawned to the first query's
  vector (wall clock, and the CPU seconds the process used, which a loaded machine inflates
  less), and the query after it shows the path is the fast one. Three cases, each the median
  of several starts:

  - *cold cache*: an empty compile cache (``SBERT["COMPILE_CACHE"]``, here ``--cache``) and an
    empty Inductor cache, as on a new host: the process exports and compiles the query graph
    and stores it (``encoder/aot.py``);
  - *warm cache*: the package the cold starts stored is loaded: no trace, no compile;
  - *no cache* (``compile_cache=None``, ``torch.compile`` in every process) with Inductor's
    own on-disk cache warm: what a process paid before the compile cache.
* **version switch**: in one warm process, a fine-tuned version of the same architecture (the
  model with perturbed weights, saved to a temporary directory) is loaded and its first query
  encoded, as a web process does after a promotion; packages and graphs built are counted
  (0 expected).

What a visitor sees, the first search after each documented server says it is ready (gunicorn,
uvicorn, the demo), is ``benchmarks.first_search``.
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

from benchmarks.common import ROOT, add_json_option, cpu_line, load_average, write_json

QUERIES = ["central banks raise interest rates", "a new vaccine reduces infections"]


def child(spawned: float, threads: int, cache: str) -> None:
    """One fresh process: load, first query, second query; prints the times."""
    import torch

    from django_sbert.encoder import SentenceEncoder, aot
    from django_sbert.encoder.paths import default_path

    torch.set_num_threads(threads)
    imported = time.time()
    path = default_path("query", "all-MiniLM-L6-v2")
    dtype = None if path.dtype == "float32" else path.dtype
    encoder = SentenceEncoder.load(
        "all-MiniLM-L6-v2", compile=path.compile, dtype=dtype, compile_cache=cache or None
    )
    loaded = time.time()
    encoder.encode(QUERIES[0])
    first = time.time()
    cpu = time.process_time()
    began = time.perf_counter()
    encoder.encode(QUERIES[1])
    second = time.perf_counter() - began
    done = "+".join(f"{k}={v}" for k, v in sorted(aot.stats.items())) or "none"
    print(
        f"RESULT {imported - spawned:.2f} {loaded - spawned:.2f} {first - spawned:.2f} "
        f"{cpu:.2f} {second * 1000:.1f} {path.label.replace(' ', '_')} {done}"
    )


def start(threads: int, cache: str, env: dict[str, str]) -> tuple[float, ...]:
    """Spawn one fresh process; its (imported, loaded, first query, cpu, next query ms)."""
    spawned = time.time()
    output = subprocess.run(
        [sys.executable, "-m", "benchmarks.warm", "--child", str(spawned)]
        + ["--threads", str(threads), "--cache", cache],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(line for line in output.splitlines() if line.startswith("RESULT"))
    imported, loaded, first, cpu, second, label, done = line.split()[1:]
    print(
        f"  {label.replace('_', ' ')}: imported {imported} s, model loaded {loaded} s, "
        f"first query {first} s after spawn ({cpu} CPU s); next query {second} ms; "
        f"packages {done}",
        flush=True,
    )
    return float(imported), float(loaded), float(first), float(cpu), float(second)


def summary(name: str, rows: list[tuple[float, ...]], figures: dict) -> None:
    first, cpu, second = (statistics.median(r[i] for r in rows) for i in (2, 3, 4))
    print(
        f"cold start, {name} (median of {len(rows)}): first query {first:.2f} s after spawn "
        f"({cpu:.2f} CPU s), next query {second:.1f} ms",
        flush=True,
    )
    figures[f"cold start, {name}"] = {
        "starts": len(rows),
        "first_query_s": round(first, 2),
        "cpu_s": round(cpu, 2),
        "next_query_ms": round(second, 1),
    }


def cold_starts(starts: int, cold: int, threads: int, cache: Path, figures: dict) -> Path:
    """Time the three cases into ``figures``; returns the warm cache directory."""
    rows = []
    for index in range(cold):
        # A new host: neither this cache nor Inductor's holds anything yet.
        empty = cache / f"cold-{index}"
        inductor = tempfile.mkdtemp(prefix="sbert-inductor-")
        rows.append(start(threads, str(empty), {"TORCHINDUCTOR_CACHE_DIR": inductor}))
    if rows:
        summary("cold cache (new host)", rows, figures)
    warm = cache / "cold-0" if cold else cache / "warm"
    if not cold:
        start(threads, str(warm), {})  # fill it
    rows = [start(threads, str(warm), {}) for _ in range(starts)]
    summary("warm cache", rows, figures)
    rows = [start(threads, "", {}) for _ in range(starts)]
    summary("no cache (torch.compile each process, Inductor's cache warm)", rows, figures)
    return warm


def version_switch(threads: int, warm: Path) -> dict:
    import torch
    from torch._dynamo.utils import counters

    from django_sbert.encoder import SentenceEncoder, aot
    from django_sbert.encoder.paths import default_path

    torch.set_num_threads(threads)
    path = default_path("query", "all-MiniLM-L6-v2")
    dtype = None if path.dtype == "float32" else path.dtype
    serving = SentenceEncoder.load(
        "all-MiniLM-L6-v2", compile=path.compile, dtype=dtype, compile_cache=warm
    )
    serving.encode(QUERIES[0])  # the warm process
    tuned = SentenceEncoder.load("all-MiniLM-L6-v2")
    with torch.no_grad():
        for parameter in tuned.transformer.parameters():
            parameter.mul_(1.01)
    directory = Path(tempfile.mkdtemp(prefix="sbert-version-")) / "v2"
    tuned.save(directory)
    times, eager = [], []
    for attempt in range(3):
        graphs = counters["stats"]["unique_graphs"] + aot.stats["built"]
        began = time.perf_counter()
        version = SentenceEncoder.load(
            directory, compile=path.compile, dtype=dtype, compile_cache=warm
        )
        version.encode(QUERIES[attempt % 2])
        times.append(time.perf_counter() - began)
        built = counters["stats"]["unique_graphs"] + aot.stats["built"] - graphs
        began = time.perf_counter()
        version.encode(QUERIES[(attempt + 1) % 2])
        eager.append(time.perf_counter() - began)
        print(
            f"switch {attempt + 1}: load + first query {times[-1]:.2f} s, graphs built "
            f"{built}, next query {eager[-1] * 1000:.1f} ms",
            flush=True,
        )
    print(
        f"version switch to first fast query (median of 3): {statistics.median(times):.2f} s "
        f"({path.label})"
    )
    return {"path": path.label, "switch_to_first_query_s": round(statistics.median(times), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=3, help="fresh processes per case")
    parser.add_argument(
        "--cold-starts", type=int, default=2, help="fresh processes with empty caches"
    )
    parser.add_argument("--cache", help="compile cache directory (default: a temporary one)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a web process)")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.threads, args.cache or "")
        return
    import torch

    print(cpu_line())
    print(f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"load average at start: {load_average()}")
    cache = Path(args.cache or tempfile.mkdtemp(prefix="sbert-compile-cache-"))
    print(f"compile cache: {cache}")
    figures: dict = {}
    warm = cold_starts(args.starts, args.cold_starts, args.threads, cache, figures)
    figures["version switch"] = version_switch(args.threads, warm)
    print(f"load average at the end: {load_average()}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
