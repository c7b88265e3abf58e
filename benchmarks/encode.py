"""Encoding throughput of SentenceEncoder against sentence-transformers, same texts, same process.

    python -m benchmarks.encode [--model DIR] [--n 2000] [--repeats 5] [--long] [--onnx]
        [--json PATH]

``--model`` takes any model directory (or a packaged name or cached hub id; default
all-MiniLM-L6-v2); sentence-transformers loads the same directory. Runs alternate (peer, ours
fp32, ours int8, ours fp32 through torch.compile, ...) so machine noise hits all alike; prints
the CPU, each variant's median sentences/s and its median ratio to sentence-transformers fp32,
the largest difference from the peer's vectors, and STSb dev Spearman for each variant.

``default`` is what a project gets with no settings: the path ``serving.paths`` chooses for an
encoding worker on this host (``encoder.paths.choose_path``, printed with its reason).
``--one-at-a-time`` encodes each text alone (a search query in a web process: use
``--threads 1``) and the ms/text column is its mean latency. ``--long`` times Wikinews
articles (truncated at 256 tokens) instead of STSb sentences.
``--int8-static`` adds static int8 through PT2E and Inductor (oneDNN's int8 kernels, AMX int8
where the CPU has it), calibrated on 256 other texts: a measurement, not a path of the app; it
needs torchao beside the venv (``benchmarks/_int8_static.py`` says how).
``--math-attention`` adds the default path with attention written out as matrix products and
a softmax (transformers' "eager" attention) instead of PyTorch's fused kernel (sdpa), which
Inductor then fuses into its own code.
``--onnx`` adds sentence-transformers' ONNX backend (``backend="onnx"``, exported from the
local model directory into a temporary copy) and its dynamically quantized int8 export; it
needs ``optimum-onnx[onnxruntime]`` importable (docs/benchmarks.md says how).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from benchmarks.common import DATA, add_json_option, cpu_line, write_json
from benchmarks.data import sts_pairs, sts_sentences
from django_sbert.encoder import SentenceEncoder, resolve_model_path
from django_sbert.encoder.paths import cpu_features, default_path


def spearman(encode, pairs) -> float:
    a = encode([p[0] for p in pairs])
    b = encode([p[1] for p in pairs])
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return 100 * spearmanr((a * b).sum(axis=1), [p[2] for p in pairs]).statistic


PEER = "sentence-transformers"


def long_texts(limit: int) -> list[str]:
    """Wikinews articles (title and text): each longer than the 256 tokens kept."""
    articles = []
    with (DATA / "wikinews/wikinews_economy.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            articles.append(f"{row['title']}\n{row['text']}")
    return [a for a in articles if len(a) > 2000][:limit]


def onnx_peers(model: Path, cpu) -> dict:
    """sentence-transformers' ONNX backend (fp32, and its int8 export) on a copy of ``model``."""
    import shutil
    import tempfile

    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    copy = Path(tempfile.mkdtemp(prefix="sbert-onnx-")) / "model"
    shutil.copytree(model, copy)
    peers = {"st onnx": SentenceTransformer(str(copy), device="cpu", backend="onnx")}
    config = "avx512_vnni" if "avx512_vnni" in cpu.flags else "avx2"
    export_dynamic_quantized_onnx_model(peers["st onnx"], config, str(copy))
    peers["st onnx int8"] = SentenceTransformer(
        str(copy),
        device="cpu",
        backend="onnx",
        model_kwargs={"file_name": f"onnx/model_qint8_{config}.onnx"},
    )
    return peers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        default="all-MiniLM-L6-v2",
        help="model directory, packaged name or cached hub id (default all-MiniLM-L6-v2)",
    )
    parser.add_argument("--n", type=int, default=2000, help="texts per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--bf16", action="store_true", help="also time dtype=bfloat16")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled variant")
    parser.add_argument("--no-int8", action="store_true", help="skip the int8 variant")
    parser.add_argument("--long", action="store_true", help="Wikinews articles, not sentences")
    parser.add_argument("--onnx", action="store_true", help="also sentence-transformers ONNX")
    parser.add_argument("--no-sts", action="store_true", help="skip STSb dev Spearman")
    parser.add_argument(
        "--int8-static",
        action="store_true",
        help="also static int8 through PT2E and Inductor (needs torchao; _int8_static.py)",
    )
    parser.add_argument(
        "--math-attention",
        action="store_true",
        help="also the default path with attention as matmul + softmax instead of sdpa",
    )
    parser.add_argument(
        "--unbucketed",
        action="store_true",
        help="also the default path with each batch padded to its longest text, not bucketed",
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="encode each text alone, as a web process encodes a search query (use --threads 1)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    model = resolve_model_path(args.model)
    print(cpu_line())
    cpu = cpu_features()
    print(f"torch capability {cpu.capability}, native bf16: {cpu.native_bf16}")
    print(f"model: {model}")
    texts = long_texts(args.n) if args.long else sts_sentences(args.n)
    peer = SentenceTransformer(str(model), device="cpu")
    path = default_path("document", args.model)
    print(f"default path: {path.label} ({path.reason})")
    dtype = None if path.dtype == "float32" else path.dtype
    variants = {
        "default": SentenceEncoder.load(model, compile=path.compile, dtype=dtype),
        "fp32": SentenceEncoder.load(model),
    }
    if args.unbucketed:
        variants["default unbucketed"] = SentenceEncoder.load(
            model, compile=path.compile, dtype=dtype
        )
        variants["default unbucketed"].pad_buckets = False
    if args.math_attention:
        variants["default, math attention"] = SentenceEncoder.load(
            model, compile=path.compile, dtype=dtype
        )
        variants["default, math attention"].transformer.set_attn_implementation("eager")
    if not args.no_int8:
        variants["int8"] = SentenceEncoder.load(model, quantize="int8")
    if args.int8_static:
        from benchmarks._int8_static import static_int8

        # Calibrated on texts of the same kind that are not timed.
        calibration = (long_texts if args.long else sts_sentences)(args.n + 256)[args.n :]
        variants["int8 static"] = static_int8(model, calibration)
        if args.math_attention:
            variants["int8 static, math attention"] = static_int8(
                model, calibration, attention="eager"
            )
        if cpu.native_bf16:
            variants["int8 static + bf16"] = static_int8(model, calibration, bf16=True)
    print(
        f"{type(variants['fp32'].transformer).__name__}, "
        f"attention {variants['fp32'].transformer.config._attn_implementation}, "
        f"{variants['fp32'].dimensions} dimensions, max_seq_length "
        f"{variants['fp32'].max_seq_length} (peer {peer.max_seq_length})"
    )
    if not args.no_compile and not (path.compile and path.dtype == "float32"):
        # Compiles on its first encode below, before any timed run.
        variants["fp32 compiled"] = SentenceEncoder.load(model, compile=True)
    if args.bf16:
        variants["bf16"] = SentenceEncoder.load(model, dtype="bfloat16")
        variants["bf16 compiled"] = SentenceEncoder.load(model, dtype="bfloat16", compile=True)
    encoders = {"sentence-transformers": lambda t: peer.encode(t, batch_size=args.batch_size)}
    if args.onnx:
        for name, onnx_peer in onnx_peers(model, cpu).items():
            encoders[name] = lambda t, p=onnx_peer: p.encode(t, batch_size=args.batch_size)
    for name, encoder in variants.items():
        encoders[name] = lambda t, e=encoder: e.encode(t, batch_size=args.batch_size)

    if args.one_at_a_time:  # a call per text: the latency of one search query, not throughput
        encoders = {
            name: (lambda t, f=f: np.concatenate([f([text]) for text in t]))
            for name, f in encoders.items()
        }

    reference = encoders["sentence-transformers"](texts)
    for name in encoders:  # also compiles the compiled variants, before any timed run
        difference = np.abs(encoders[name](texts) - reference).max()
        print(f"max |{name} - peer| = {difference:.2e}", flush=True)

    rates: dict[str, list[float]] = {name: [] for name in encoders}
    ratios: dict[str, list[float]] = {name: [] for name in encoders if name != PEER}
    for repeat in range(args.repeats):
        seconds = {}
        for name, encode in encoders.items():
            start = time.perf_counter()
            encode(texts)
            seconds[name] = time.perf_counter() - start
            rates[name].append(len(texts) / seconds[name])
        for name in ratios:
            ratios[name].append(seconds[PEER] / seconds[name])
        print(
            f"run {repeat + 1}: "
            + ", ".join(f"{k} {len(texts) / v:.0f}/s" for k, v in seconds.items()),
            flush=True,
        )

    dev = sts_pairs(DATA / "stsbenchmark/sts-dev.csv")
    print(
        f"\n{len(texts)} {'Wikinews articles' if args.long else 'STSb sentences'}, "
        f"{'one at a time' if args.one_at_a_time else f'batch {args.batch_size}'}, "
        f"{torch.get_num_threads()} threads, "
        f"median of {args.repeats} alternating runs"
    )
    width = max(22, *(len(name) + 2 for name in encoders))
    print(f"{'variant':<{width}}{'sent/s':>8}{'ms/text':>9}{'x peer':>8}{'STSb dev':>10}")
    table = []
    for name, encode in encoders.items():
        ratio = statistics.median(ratios[name]) if name in ratios else 1.0
        rate = statistics.median(rates[name])
        stsb = None if args.no_sts else spearman(encode, dev)
        sts = "" if stsb is None else f"{stsb:>10.2f}"
        print(f"{name:<{width}}{rate:>8.0f}{1000 / rate:>9.2f}{ratio:>8.2f}{sts}", flush=True)
        table.append(
            {
                "variant": name,
                "sentences_per_s": round(rate, 1),
                "ms_per_text": round(1000 / rate, 2),
                "x_peer": round(ratio, 2),
                "stsb_dev_spearman": None if stsb is None else round(stsb, 2),
            }
        )
    write_json(
        args.json,
        {
            "texts": len(texts),
            "batch_size": args.batch_size,
            "threads": torch.get_num_threads(),
            "variants": table,
        },
    )


if __name__ == "__main__":
    main()
