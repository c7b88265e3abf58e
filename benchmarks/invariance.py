"""Same text, same vector: how far a text's vector moves when it is encoded inside a batch
rather than alone, per inference path and per serving path.

    .venv/bin/python -m benchmarks.invariance [--texts 1000] [--paths ...] [--no-serving]

Texts: the SciFact train claims, then the first sentences of SciFact abstracts up to
``--texts`` (../shared/data, never ../shared/eval), so batches mix lengths (5 to 100 tokens).
Each figure is the largest absolute difference of one value (vectors are unit vectors of 384
values) between a text's vector encoded alone, on one thread, as a visitor's search is, and
the same text's vector another way; ``min cos`` the lowest cosine between the two.

**Inference paths** (all-MiniLM-L6-v2, ``SentenceEncoder`` without Django): eager and compiled
float32, ONNX Runtime (its single texts; lists run torch), eager and compiled bfloat16
(emulated where the CPU has no native bf16, and marked so). Ways compared with alone:

* ``batch N``: ``encode(texts)`` in batches of N of a shuffled order (padded to the bucketed
  width: the batch path of the indexing worker, and of queries before ``alone``);
* ``batch N unpadded``: the same batches sorted by length and padded to the longest only;
* ``alone``: ``encode(texts, alone=True)`` on the shuffled list (every query path now);
* ``alone, 2 threads``: each text alone on two torch threads.

**Serving paths** (Django, this host's default path or ``--query-runtime``'s, with a database):
a visitor's search (``serving.encode_query``, the reference), the query server (a
``QueryServer`` on a Unix socket in this process, 16 client threads sending every text at once:
batches of up to 16, as many encoded at once as CPUs), the
evaluation's queries (``encode_texts(role="query")``, what ``sbert_evaluate`` encodes) and an
async search's (``query.aio.encode_text``, 8 at a time). The query server's queries/s and
CPU ms per query are printed too, and with ``--legacy`` the same for its former batched encode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.common import DATA, add_json_option, cpu_line, load_average, write_json
from benchmarks.data import SENTENCE_END
from django_sbert.encoder.paths import QUERY_RUNTIMES

MODEL = "all-MiniLM-L6-v2"
PATHS = (
    "eager float32",
    "compiled float32",
    "onnxruntime",
    "onnxruntime int8",
    "eager bfloat16",
    "compiled bfloat16",
)
BATCHES = (4, 16, 64)


def texts(n: int) -> list[str]:
    """``n`` texts: the SciFact train claims, then abstracts' first sentences."""
    out = [json.loads(line)["text"] for line in (DATA / "scifact/queries-train.jsonl").open()]
    for line in (DATA / "scifact/corpus.jsonl").open(encoding="utf-8"):
        if len(out) >= n:
            break
        first = SENTENCE_END.split(json.loads(line)["text"])[0]
        out.append(" ".join(first.split()[:80]))
    return out[:n]


def difference(reference: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """The largest absolute difference of a value and the lowest cosine, row by row."""
    cos = np.sum(reference * other, axis=1) / (
        np.linalg.norm(reference, axis=1) * np.linalg.norm(other, axis=1)
    )
    return {"max_abs": float(np.abs(reference - other).max()), "min_cos": float(cos.min())}


def show(label: str, figures: dict[str, float], extra: str = "") -> None:
    print(
        f"  {label:<34s} max abs {figures['max_abs']:.1e}   min cos {figures['min_cos']:.8f}"
        f"{extra}",
        flush=True,
    )


def load_path(path: str, cache: str):
    from django_sbert.encoder import SentenceEncoder

    return SentenceEncoder.load(
        MODEL,
        dtype="bfloat16" if "bfloat16" in path else None,
        compile=path.startswith("compiled"),
        compile_cache=cache,
        query_runtime={"onnxruntime": "onnxruntime", "onnxruntime int8": "onnxruntime-int8"}.get(
            path, "torch"
        ),
        query_threads=1,
    )


def in_order(encode: Callable[[list[str]], np.ndarray], items: list[str], seed: int) -> np.ndarray:
    """``encode`` of ``items`` shuffled by ``seed``, returned in the items' order."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    out = np.empty((len(items), 384), dtype=np.float32)
    out[order] = encode([items[i] for i in order])
    return out


def encoder_paths(items: list[str], paths: Sequence[str]) -> dict[str, dict]:
    from django_sbert.encoder.paths import cpu_features

    emulated = not cpu_features().native_bf16
    cache = tempfile.mkdtemp(prefix="sbert-invariance-")
    figures: dict[str, dict] = {}
    for path in paths:
        label = f"{path} (emulated: no native bf16)" if emulated and "bf16" in path else path
        print(f"{label}:", flush=True)
        figures[label] = measure_path(load_path(path, cache), items)
    return figures


def measure_path(model, items: list[str]) -> dict[str, dict[str, float]]:
    """One path's differences from alone (see the module), and CPU ms per text."""
    import torch

    torch.set_num_threads(1)
    model.encode(items[0])  # builds what the first call builds (an export, a graph)
    for size in BATCHES:
        model.encode(items[:size], batch_size=size)
    started = time.process_time()
    alone = np.stack([model.encode(text) for text in items])  # a visitor's search, each
    ms_alone = 1000 * (time.process_time() - started) / len(items)
    rows: dict[str, dict[str, float]] = {}
    for size in BATCHES:
        started = time.process_time()
        batched = in_order(lambda b, s=size: model.encode(b, batch_size=s), items, size)
        ms = 1000 * (time.process_time() - started) / len(items)
        rows[f"batch {size}"] = {**difference(alone, batched), "cpu_ms_per_text": ms}
        show(f"batch {size}", rows[f"batch {size}"], f"   {ms:.2f} CPU ms/text")
    model.pad_buckets = False
    unpadded = model.encode(items, batch_size=16)  # sorted by length, padded to the longest
    model.pad_buckets = True
    rows["batch 16 unpadded"] = difference(alone, unpadded)
    show("batch 16 unpadded", rows["batch 16 unpadded"])
    listed = in_order(lambda b: model.encode(b, alone=True), items, 7)
    rows["alone"] = {**difference(alone, listed), "cpu_ms_per_text": ms_alone}
    show("alone (shuffled list)", rows["alone"], f"   {ms_alone:.2f} CPU ms/text")
    torch.set_num_threads(2)
    rows["alone, 2 threads"] = difference(alone, np.stack([model.encode(t) for t in items]))
    show("alone, 2 threads", rows["alone, 2 threads"])
    return rows


def setup_serving(query_runtime: str) -> None:
    from benchmarks.django_setup import setup_django

    encoder = {"MODEL": MODEL, "QUERY_RUNTIME": query_runtime}
    setup_django({"ENCODERS": {"default": encoder}, "AUTO_EMBED": False})


def query_server_run(
    items: list[str], encode: Callable, clients: int = 16
) -> tuple[np.ndarray, dict[str, float]]:
    """Every text through a ``QueryServer`` on a Unix socket, ``clients`` at a time: the
    vectors in the items' order, queries/s and the server's batch sizes."""
    from django_sbert.serving import serving_record
    from django_sbert.serving.query_client import HEADER, exchange
    from django_sbert.serving.query_server import QueryServer

    current = serving_record("default")
    path = os.path.join(tempfile.mkdtemp(prefix="sbert-invariance-"), "query.sock")
    # The command's defaults: batches of up to 16, as many queries at once as CPUs.
    server = QueryServer(path, encode, max_batch=16, cache_size=0, concurrency=os.cpu_count() or 1)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    task: list[asyncio.Task] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        started = asyncio.Event()
        task.append(loop.create_task(server.serve(started)))
        loop.run_until_complete(started.wait())
        ready.set()
        loop.run_until_complete(asyncio.gather(task[0], return_exceptions=True))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait()
    assert HEADER.size == 4
    local = threading.local()
    request = {"encoder": current.encoder, "version": current.version}
    request["directory"] = current.directory

    def ask(text: str) -> np.ndarray:
        if getattr(local, "connection", None) is None:
            local.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            local.connection.connect(path)
        status, payload = exchange(local.connection, json.dumps({**request, "text": text}).encode())
        assert status == 0, payload
        return np.frombuffer(payload, dtype=np.float32)

    cpu, wall = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        vectors = np.stack(list(pool.map(ask, items)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = server.stats()
    loop.call_soon_threadsafe(task[0].cancel)
    thread.join(timeout=10)
    sizes = {int(k): v for k, v in stats["batch_sizes"].items()}
    mean_batch = sum(k * v for k, v in sizes.items()) / max(1, sum(sizes.values()))
    speed = {"queries_per_s": len(items) / wall, "cpu_ms_per_query": 1000 * cpu / len(items)}
    return vectors, {**speed, "mean_batch": mean_batch}


def serving_paths(items: list[str], legacy: bool) -> dict[str, dict]:
    import torch

    from django_sbert.query import aio
    from django_sbert.serving import cache, encode_query, encode_texts, encoder_for, path_report

    torch.set_num_threads(2)  # the query server's --threads on this host (every CPU)
    print(f"serving ({path_report('default')['queries']} queries on this host):", flush=True)
    alone = np.stack([encode_query(text) for text in items])
    figures: dict[str, dict] = {}
    cache.clear_query_cache()
    server, speed = query_server_run(items, cache.encode_queries)
    figures["query server"] = {**difference(alone, server), **speed}
    show("query server", figures["query server"], _speed(speed))
    if legacy:  # the former encode of a batch: one padded forward pass for the whole batch

        def batched(texts: list[str], encoder: str, version: str, directory: str | None):
            model = encoder_for(cache.Serving(encoder, version, directory))
            return model.encode(list(texts), batch_size=32)

        current = cache.serving_record("default")
        for size in (2, 16):  # the batch graph is compiled on first use: not timed
            batched(items[:size], current.encoder, current.version, current.directory)
        server, speed = query_server_run(items, batched)
        figures["query server, batched (before)"] = {**difference(alone, server), **speed}
        show(
            "query server, batched (before)",
            figures["query server, batched (before)"],
            _speed(speed),
        )
    cache.clear_query_cache()
    figures["sbert_evaluate"] = difference(alone, encode_texts(items, role="query"))
    show("sbert_evaluate (encode_texts)", figures["sbert_evaluate"])
    cache.clear_query_cache()

    async def many() -> list[np.ndarray]:
        limit = asyncio.Semaphore(8)

        async def one(text: str) -> np.ndarray:
            async with limit:
                return (await aio.encode_text(text, "default")).vector

        return await asyncio.gather(*(one(text) for text in items))

    figures["async"] = difference(alone, np.stack(asyncio.run(many())))
    show("async (aio.encode_text)", figures["async"])
    return figures


def _speed(speed: dict[str, float]) -> str:
    return (
        f"   {speed['queries_per_s']:.1f} queries/s, {speed['cpu_ms_per_query']:.2f} CPU "
        f"ms/query, mean batch {speed['mean_batch']:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--no-serving", action="store_true", help="the encoder paths only")
    parser.add_argument("--legacy", action="store_true", help="the server's former batches too")
    parser.add_argument(
        "--query-runtime", default="auto", choices=QUERY_RUNTIMES, help="the serving paths'"
    )
    add_json_option(parser)
    args = parser.parse_args()
    print(cpu_line(), f"load average {load_average()}", flush=True)
    items = texts(args.texts)
    print(f"{len(items)} texts (SciFact train claims, abstracts' first sentences)", flush=True)
    figures: dict[str, dict] = {"encoder": encoder_paths(items, args.paths)}
    if not args.no_serving:
        setup_serving(args.query_runtime)
        figures["serving"] = serving_paths(items, args.legacy)
    print(f"load average at the end {load_average()}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
