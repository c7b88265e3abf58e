"""One search query's encode on each inference path, against sentence-transformers and OpenVINO.

    .venv/bin/python -m benchmarks.query_encode [--queries 300] [--rounds 5] [--threads 1]

What ``similar_to(text)`` pays before PostgreSQL sees the query: all-MiniLM-L6-v2 encoding one
SciFact train claim (about 20 tokens) that was never encoded before, on one thread (a web
process's ``QUERY_THREADS``). Paths, each loaded as the serving layer loads it:

* ``onnxruntime``: ``QUERY_RUNTIME="onnxruntime"`` (the default on a CPU without AMX);
* ``compiled bfloat16`` (where the CPU has native bf16), ``compiled float32``: torch's
  single-query graph (``QUERY_RUNTIME="torch"``), compiled ahead of time;
* ``eager float32``: ``COMPILE=False``;
* the peers: sentence-transformers' ``encode`` of one text (float32, torch); with
  ``--st-onnx``, its ``backend="onnx"`` (ONNX Runtime through optimum, exported by
  optimum; its dependency needs an older transformers, so install it beside the venv as
  docs/benchmarks.md says and put it first on ``PYTHONPATH``); and OpenVINO (when
  ``openvino`` is importable: the runtime of sentence-transformers' ``backend="openvino"``)
  running the graph ``onnx_query`` exports, in float32 and, where the CPU has native bf16,
  with its bf16 inference hint.

``--ndcg``: then the search quality each of our ONNX Runtime paths gives, encoding each claim
alone as a search does: nDCG@10 of the exact cosine top 10 over the 5,183 abstracts (vectors
from torch float32, as a worker stores them), on SciFact's judged train claims and on the
300 test claims of ../shared/eval (held out: reported, never chosen on).

Each round takes its own slice of the claims and times every path on it, the paths in turn
(so a noisy moment falls on all of them; no path caches vectors); per path the medians over
rounds of the per-round p50 and p99, wall and CPU time. ``max abs diff``: the largest
difference of a vector from sentence-transformers'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from benchmarks.common import DATA, add_json_option, cpu_line, load_average, percentile, write_json

Encode = Callable[[str], np.ndarray]


def our_paths(threads: int, names: Collection[str] | None = None) -> dict[str, Encode]:
    """The serving layer's paths for one query, loaded the way ``serving.cache`` loads them
    (``names``: only those; compiled bfloat16 only on a CPU with native bf16)."""
    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.paths import cpu_features

    cache = Path(tempfile.mkdtemp(prefix="sbert-query-encode-"))
    model = "all-MiniLM-L6-v2"
    loaders: dict[str, Callable[[], SentenceEncoder]] = {
        "onnxruntime": lambda: SentenceEncoder.load(
            model, query_runtime="onnxruntime", query_threads=threads
        ),
        "onnxruntime int8": lambda: SentenceEncoder.load(
            model, query_runtime="onnxruntime-int8", query_threads=threads
        ),
        "compiled bfloat16": lambda: SentenceEncoder.load(
            model, dtype="bfloat16", compile=True, compile_cache=cache
        ),
        "compiled float32": lambda: SentenceEncoder.load(model, compile=True, compile_cache=cache),
        "eager float32": lambda: SentenceEncoder.load(model),
    }
    if not cpu_features().native_bf16:
        del loaders["compiled bfloat16"]
    return {name: load().encode for name, load in loaders.items() if names is None or name in names}


def openvino_paths(threads: int) -> dict[str, Encode]:
    """OpenVINO on the graph ``onnx_query`` exports, float32 and (native bf16 only) bf16."""
    try:
        import openvino
    except ImportError:
        print("openvino: not installed, skipped (pip install openvino)", flush=True)
        return {}
    from django_sbert.encoder import SentenceEncoder
    from django_sbert.encoder.onnx_query import _export
    from django_sbert.encoder.paths import cpu_features

    model = SentenceEncoder.load("all-MiniLM-L6-v2")
    graph = Path(tempfile.mkdtemp(prefix="sbert-openvino-")) / "query.onnx"
    graph.write_bytes(_export(model.transformer))
    core = openvino.Core()
    hints = ["f32", "bf16"] if cpu_features().native_bf16 else ["f32"]
    paths: dict[str, Encode] = {}
    for hint in hints:
        compiled = core.compile_model(
            core.read_model(str(graph)),
            "CPU",
            {
                "INFERENCE_NUM_THREADS": threads,
                "NUM_STREAMS": 1,
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": hint,
            },
        )
        request, output = compiled.create_infer_request(), compiled.output(0)

        def encode(text: str, request=request, output=output) -> np.ndarray:
            features = model.tokenize([text])
            states = request.infer(
                {
                    "input_ids": features["input_ids"].numpy(),
                    "attention_mask": features["attention_mask"].numpy(),
                }
            )[output]
            vector = states.mean(axis=1)[0]  # one text: no padding to mask out
            return vector / np.linalg.norm(vector)

        paths[f"openvino {'float32' if hint == 'f32' else 'bfloat16'}"] = encode
    return paths


def ndcg_per_path(paths: dict[str, Encode], threads: int) -> dict[str, dict[str, float]]:
    """nDCG@10 of the exact vector top 10 with each path's query vectors (``--ndcg``)."""
    from benchmarks.common import SHARED
    from benchmarks.hybrid import corpus, embedding_text
    from benchmarks.search import encode_cached
    from django_sbert.encoder.metrics import ranking_metrics

    rows = corpus()
    vectors = encode_cached([embedding_text(row) for row in rows], len(rows), threads)
    ids = [row["id"] for row in rows]
    sets = {"train claims": DATA / "scifact", "test claims (held out)": SHARED / "eval/scifact"}
    figures: dict[str, dict[str, float]] = {}
    first = next(iter(paths))  # float32: the vectors the others are compared with
    for label, folder in sets.items():
        split = "train" if "train" in label else "test"
        relevant: dict[str, dict[str, int]] = {}
        qrels = (folder / f"qrels-{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]
        for line in qrels:
            qid, doc, score = line.split("\t")
            relevant.setdefault(qid, {})[doc] = int(score)
        queries = [json.loads(line) for line in (folder / f"queries-{split}.jsonl").open()]
        queries = [q for q in queries if q["_id"] in relevant]
        reference = None
        for name, encode in paths.items():
            query_vectors = np.stack([encode(q["text"]) for q in queries])
            if reference is None:
                reference = query_vectors
            lowest = float((query_vectors * reference).sum(axis=1).min())  # unit vectors
            top = np.argsort(-(query_vectors @ vectors.T), axis=1)[:, :10]
            pairs = zip(queries, top, strict=True)
            rankings = {q["_id"]: [ids[i] for i in row] for q, row in pairs}
            score = 100 * ranking_metrics(rankings, relevant)["ndcg@10"]
            figures.setdefault(name, {})[label] = score
            figures[name][f"{label}: lowest cosine to {first}"] = lowest
            print(
                f"{name}: vector nDCG@10 on {len(queries)} {label} {score:.2f} "
                f"(lowest cosine to {first} {lowest:.4f})",
                flush=True,
            )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=300, help="claims per path and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument(
        "--ndcg", action="store_true", help="then nDCG@10 of our ONNX Runtime paths' vectors"
    )
    parser.add_argument(
        "--st-onnx", action="store_true", help="also sentence-transformers' backend='onnx'"
    )
    add_json_option(parser)
    args = parser.parse_args()
    import torch
    from sentence_transformers import SentenceTransformer

    from django_sbert.encoder.spec import resolve_model_path

    print(cpu_line(), f"load average {load_average()}", flush=True)
    torch.set_num_threads(args.threads)
    claims = [json.loads(line)["text"] for line in (DATA / "scifact/queries-train.jsonl").open()]
    peer = SentenceTransformer(str(resolve_model_path("all-MiniLM-L6-v2")), device="cpu")
    paths: dict[str, Encode] = {
        "sentence-transformers float32": lambda text: peer.encode(text, show_progress_bar=False)
    }
    if args.st_onnx:
        from benchmarks.encode import onnx_peers
        from django_sbert.encoder.paths import cpu_features

        onnx_peer = onnx_peers(resolve_model_path("all-MiniLM-L6-v2"), cpu_features())["st onnx"]
        paths["sentence-transformers onnx"] = lambda text: onnx_peer.encode(
            text, show_progress_bar=False
        )
    paths.update(our_paths(args.threads))
    if not args.no_openvino:
        paths.update(openvino_paths(args.threads))
    torch.set_num_threads(args.threads)

    warm, unseen = claims[:20], claims[20:]
    reference = peer.encode(warm, show_progress_bar=False)
    error = {}
    for name, encode in paths.items():
        got = np.stack([encode(text) for text in warm])  # builds graphs and sessions
        error[name] = float(np.abs(got - reference).max())

    samples: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
    for round_ in range(args.rounds):
        start = (round_ * args.queries) % max(1, len(unseen) - args.queries)
        texts = unseen[start : start + args.queries]
        for name, encode in paths.items():
            wall, cpu = [], []
            for text in texts:
                began, began_cpu = time.perf_counter(), time.process_time()
                encode(text)
                wall.append(time.perf_counter() - began)
                cpu.append(time.process_time() - began_cpu)
            samples[name].append(
                {
                    "wall_p50_ms": 1000 * percentile(wall, 50),
                    "wall_p99_ms": 1000 * percentile(wall, 99),
                    "cpu_p50_ms": 1000 * percentile(cpu, 50),
                }
            )
        print(f"round {round_ + 1} of {args.rounds} done", flush=True)

    results = {}
    base = None
    print("\n| path | wall p50 | wall p99 | CPU p50 | x sentence-transformers | max abs diff |")
    print("|---|---|---|---|---|---|")
    for name, rounds in samples.items():
        figures = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        figures["max_abs_diff"] = error[name]
        base = base or figures["wall_p50_ms"]
        results[name] = figures
        print(
            f"| {name} | {figures['wall_p50_ms']:.2f} ms | {figures['wall_p99_ms']:.2f} ms | "
            f"{figures['cpu_p50_ms']:.2f} ms | {base / figures['wall_p50_ms']:.2f} | "
            f"{error[name]:.1e} |"
        )
    print(f"\nload average at the end {load_average()}")
    quality = {}
    if args.ndcg:
        ours = {name: paths[name] for name in ("onnxruntime", "onnxruntime int8")}
        quality = ndcg_per_path(ours, args.threads)
    write_json(
        args.json,
        {"cpu": cpu_line(), "threads": args.threads, "paths": results, "ndcg@10": quality},
    )


if __name__ == "__main__":
    main()
