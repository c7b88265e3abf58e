"""SentenceEncoder: Transformer -> Pooling -> [Dense] -> [Normalize], one shared-weight encoder.

Each text is encoded on its own into a fixed-size vector ``s = pool(BERT(x))``; texts are
compared by cosine of their vectors (Reimers & Gurevych 2019). Directories are read and
written in the sentence-transformers format, so models move freely between the two.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .compiled import CompiledTransformer
from .dense import Dense
from .exceptions import OnnxUnavailable
from .paths import ONNX_RUNTIMES
from .pooling import Pooling
from .spec import LEGACY_POOLING_KEYS, ModelSpec, read_spec, resolve_model_path
from .tokenization import TextTokenizer, TokenRows
from .transformer import load_transformer

logger = logging.getLogger("django_sbert.encoder")

LongText = Literal["truncate", "chunk"]
QueryRuntime = Literal["torch", "onnxruntime", "onnxruntime-int8"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# The module type strings every sentence-transformers release understands.
LEGACY_MODULE_TYPES = {
    kind: f"sentence_transformers.models.{kind.title()}"
    for kind in ("transformer", "pooling", "dense", "normalize")
}


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads, then restore the process setting.

    One short text (a search query) gains little from a second thread, while OpenMP threads
    that spin-wait after each parallel region take CPU from whatever runs next, such as a
    PostgreSQL server on the same cores. ``None`` leaves the setting alone. The setting is
    process-wide: callers that encode from several threads at once serialize the calls.
    """
    if threads is None:
        yield
        return
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}.")
    previous = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _check_texts(texts: Sequence[str]) -> list[str]:
    checked = list(texts)
    for index, text in enumerate(checked):
        if not isinstance(text, str):
            raise TypeError(
                f"encode() takes strings; item {index} is {type(text).__name__}: {text!r:.60}"
            )
    return checked


class SentenceEncoder(nn.Module):
    """A Sentence-BERT bi-encoder loaded from (and saved to) a sentence-transformers directory.

    Use ``SentenceEncoder.load(name)`` to build one and ``encode(texts)`` for vectors. For
    training, ``tokenize(texts)`` gives a padded batch and calling the module on it gives
    differentiable sentence embeddings ``(batch, dimensions)``.
    """

    def __init__(
        self,
        transformer: nn.Module,
        hf_tokenizer: Any,
        spec: ModelSpec,
        pooling: Pooling,
        dense: Sequence[Dense] = (),
        normalize: bool = False,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.pooling = pooling
        self.dense = nn.ModuleList(dense)
        self.normalize_output = normalize
        # encode() pads batches to a few widths (tokenization.bucket_width): bounded shapes,
        # same vectors. False pads each batch to its longest text (benchmarks compare).
        self.pad_buckets = True
        self.spec = spec
        self.prompts = dict(spec.prompts)
        self.default_prompt_name = spec.default_prompt_name
        self.similarity_fn_name = spec.similarity_fn_name
        self.quantized: str | None = None
        # Set by compile_for_inference(): encode goes through torch.compile (built on first use).
        self.compile_requested = False
        self.compile_cache: Path | None = None  # where the single-query graph is kept (aot.py)
        self.compile_batches = True  # False: batches run eager (a web process's: warmup.warm)
        self._compiled: CompiledTransformer | None = None
        self._compile_lock = threading.Lock()
        # Set by set_query_runtime(): single texts through ONNX Runtime (onnx_query.py).
        self.query_runtime: QueryRuntime = "torch"
        self.query_threads = 1
        self.query_cache: Path | None = None  # where exported query graphs are kept
        self.query_runtime_failure: str | None = None  # why ONNX Runtime fell back to torch
        self._onnx: Any = None  # the OnnxQueryGraph once built; False once it failed
        # Float32 weights kept for its export, in a list so that nn.Module does not adopt them.
        self._onnx_source: list[nn.Module] = []
        self._hf_tokenizer = hf_tokenizer
        pad_id = hf_tokenizer.pad_token_id if hf_tokenizer.pad_token_id is not None else 0
        self.tokenizer = TextTokenizer(
            hf_tokenizer.backend_tokenizer, spec.max_seq_length, pad_id, spec.do_lower_case
        )

    # ---------------------------------------------------------------- loading and saving
    @classmethod
    def load(
        cls,
        name_or_path: str | Path,
        *,
        device: str | torch.device | None = None,
        quantize: Literal["int8"] | None = None,
        dtype: str | torch.dtype | None = None,
        threads: int | None = None,
        allow_download: bool | None = None,
        compile: bool = False,
        compile_cache: str | Path | None = None,
        query_runtime: QueryRuntime = "torch",
        query_threads: int = 1,
    ) -> SentenceEncoder:
        """Load a model by directory, packaged name (``all-MiniLM-L6-v2``) or hub id.

        ``quantize="int8"`` quantizes the transformer's linear layers dynamically (CPU);
        ``dtype="bfloat16"`` runs the transformer in bf16; ``threads`` sets torch's intra-op
        threads for the process (set it explicitly in forked workers); ``compile=True`` runs
        ``encode`` through ``torch.compile`` (see ``compile_for_inference()``), with its
        single-query graph kept in ``compile_cache`` when given; ``query_runtime="onnxruntime"``
        (or ``"onnxruntime-int8"``) encodes single texts through ONNX Runtime on
        ``query_threads`` threads (see ``set_query_runtime()``).
        """
        from transformers import AutoTokenizer

        if threads is not None:
            torch.set_num_threads(int(threads))
        path = resolve_model_path(name_or_path, allow_download=allow_download)
        spec = read_spec(path)
        transformer_dir = path / next(m.path for m in spec.modules if m.kind == "transformer")
        # The transformer first: an architecture we cannot run is refused before the tokenizer
        # (which reads config.json too) logs its own complaints about it.
        transformer = load_transformer(transformer_dir)
        hf_tokenizer = AutoTokenizer.from_pretrained(transformer_dir, local_files_only=True)
        if not getattr(hf_tokenizer, "is_fast", False):
            raise ValueError(f"{transformer_dir}: a fast (Rust) tokenizer is required.")
        dense = [
            Dense.load(path / module.path, config)
            for module, config in zip(
                [m for m in spec.modules if m.kind == "dense"], spec.dense, strict=True
            )
        ]
        pooling = Pooling(spec.hidden_size, spec.pooling_modes, spec.include_prompt)
        encoder = cls(transformer, hf_tokenizer, spec, pooling, dense, spec.normalize)
        encoder.eval()
        if dtype is not None:
            if query_runtime in ONNX_RUNTIMES and DTYPES.get(dtype, dtype) != torch.float32:
                # Queries run in float32 through ONNX Runtime: export them from these
                # weights, not from their bf16 rounding (dropped after the export).
                encoder._onnx_source = [copy.deepcopy(encoder.transformer)]
            encoder.transformer.to(DTYPES[dtype] if isinstance(dtype, str) else dtype)
        if device is not None:
            encoder.to(device)
        if quantize is not None:
            encoder.quantize(quantize)
        if compile:
            encoder.compile_for_inference(cache=compile_cache)
        if query_runtime != "torch":
            encoder.set_query_runtime(query_runtime, threads=query_threads, cache=compile_cache)
        return encoder

    def set_query_runtime(
        self, runtime: QueryRuntime, threads: int = 1, cache: str | Path | None = None
    ) -> SentenceEncoder:
        """Encode single texts (search queries) through ``runtime`` from now on; returns self.

        ``"onnxruntime"``: single texts run through ONNX Runtime on ``threads`` threads, in
        float32 (``encoder/onnx_query.py``); ``"onnxruntime-int8"``: the same graph with int8
        weights (faster; cosine about 0.98 to float32's). Batches keep the torch path, and
        copies run torch until asked. If the graph cannot be built, a warning says why and
        torch serves the queries (``query_runtime_failure``). ``"torch"``: torch for all.
        ``cache``: a directory where exported graphs are kept for the host's other processes.
        """
        if runtime not in ("torch", *ONNX_RUNTIMES):
            raise ValueError(
                f"runtime must be 'torch', 'onnxruntime' or 'onnxruntime-int8', got {runtime!r}."
            )
        if runtime in ONNX_RUNTIMES and (self.quantized or self.device.type != "cpu"):
            raise ValueError(
                "ONNX Runtime serves float models on the CPU; this encoder is "
                f"{'int8-quantized' if self.quantized else f'on {self.device}'}."
            )
        self.query_runtime, self.query_threads = runtime, max(1, int(threads))
        self.query_cache = Path(cache) if cache is not None else None
        self._onnx, self.query_runtime_failure = None, None
        return self

    def compile_for_inference(self, cache: str | Path | None = None) -> SentenceEncoder:
        """Run ``encode`` through ``torch.compile`` from now on; returns the encoder.

        About twice the throughput and half the latency of eager mode on a CPU, with the same
        vectors (within 1e-5); it needs a C++ compiler, and a failed compile warns and falls
        back to eager mode. ``train()`` switches compiling off (train a copy: ``fit`` does).
        ``cache``: a directory for the single-query graph compiled ahead of time
        (``encoder/aot.py``). Why the graphs are built so: ``encoder/compiled.py``. (Not
        ``nn.Module.compile``, which compiles the whole module for training and inference.)
        """
        if self.quantized:
            raise ValueError(
                "compile_for_inference() runs float models; an int8-quantized encoder already "
                "has its own kernels. Load without quantize= to compile."
            )
        self.compile_requested = True
        self.compile_cache = Path(cache) if cache is not None else None
        self._compiled = None
        return self

    @property
    def compiled(self) -> bool:
        """Whether ``encode`` runs through ``torch.compile`` (False after a failed compile)."""
        return self.compile_requested and (self._compiled is None or self._compiled.active)

    @property
    def compile_failure(self) -> str | None:
        """Why compiling failed in this process (the encoder then runs eager), else None."""
        return self._compiled.failure if self._compiled is not None else None

    def train(self, mode: bool = True) -> SentenceEncoder:
        if mode:  # weights will change: export them again afterwards
            self._onnx, self._onnx_source = (None if self._onnx is not False else False), []
        if mode and self.compile_requested:
            # Training changes weights in place, which the batch graph (frozen) would not see.
            self.compile_requested, self._compiled = False, None
            warnings.warn(
                "train() switched torch.compile off for this encoder: the batch graph "
                "froze the weights. Train a copy (fit() does), or call "
                "compile_for_inference() again after training.",
                RuntimeWarning,
                stacklevel=2,
            )
        return super().train(mode)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        self._compiled = None  # new weights: the next encode compiles them afresh
        self._onnx = None if self._onnx is not False else False  # and exports them again
        self._onnx_source = []
        if self.compile_requested:
            import torch._dynamo

            torch._dynamo.reset()  # frozen graphs are cached per code object, not per wrapper
        return super().load_state_dict(*args, **kwargs)

    def _inference_transformer(self, batch: bool = False) -> Any:
        """The transformer ``encode`` calls: the compiled one when requested, built once; the
        eager module for a ``batch`` unless ``compile_batches``, and for training (no inference
        mode), so gradients flow as usual."""
        eager = batch and not getattr(self, "compile_batches", True)
        if eager or not self.compile_requested or not torch.is_inference_mode_enabled():
            return self.transformer
        compiled = self._compiled
        if compiled is None or compiled.transformer is not self.transformer:
            with self._compile_lock:
                if self._compiled is None or self._compiled.transformer is not self.transformer:
                    self._compiled = CompiledTransformer(self.transformer, self.compile_cache)
                compiled = self._compiled
        return compiled

    def _onnx_graph(self) -> Any:
        """The ONNX Runtime graph for one text when asked for and usable (built once per set
        of weights, under the compile lock), else None: torch serves the text."""
        if self.query_runtime not in ONNX_RUNTIMES or not torch.is_inference_mode_enabled():
            return None
        graph, int8 = self._onnx, self.query_runtime == "onnxruntime-int8"
        if graph is False:
            return None
        fresh = graph is not None and graph.transformer is self.transformer and graph.int8 == int8
        if fresh and graph.current:  # else new weights, or a runtime switched during its build
            return graph
        with self._compile_lock:
            graph = self._onnx
            stale = graph is None or graph.transformer is not self.transformer
            if graph is not False and (stale or graph.int8 != int8 or not graph.current):
                from .onnx_query import OnnxQueryGraph  # onnxruntime loads on first use

                try:
                    kept, self._onnx_source = self._onnx_source, []
                    # Built before: the weights changed since, and the kept ones are not theirs.
                    source = kept[0] if kept and graph is None else None
                    graph = self._onnx = OnnxQueryGraph(
                        self.transformer, self.query_threads, source, self.query_cache, int8=int8
                    )
                except OnnxUnavailable as exc:
                    self._onnx, self.query_runtime_failure = False, str(exc)
                    message = (
                        "ONNX Runtime cannot encode this model's queries, so torch does "
                        f"({'float32' if int8 else 'same'} vectors, slower for one text): {exc}"
                    )
                    logger.warning(message)
                    warnings.warn(message, RuntimeWarning, stacklevel=4)
                    return None
        return graph or None

    def __getstate__(self) -> dict[str, Any]:
        # Copies (fit() trains one) and pickles carry the weights, never a compiled graph nor
        # an exported one: they run torch until asked again (compile_for_inference(),
        # set_query_runtime()), so a training copy never exports its changing weights.
        state = dict(super().__getstate__())
        state.update(compile_requested=False, _compiled=None, _compile_lock=None)
        state.update(query_runtime="torch", _onnx=None, _onnx_source=[])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        defaults = {"compile_requested": False, "_compiled": None, "_onnx": None}
        defaults.update(_onnx_source=[], query_cache=None)
        defaults.update(query_runtime="torch", query_threads=1, query_runtime_failure=None)
        super().__setstate__({**defaults, **state})
        self._compile_lock = threading.Lock()

    def quantize(self, scheme: Literal["int8"] = "int8") -> SentenceEncoder:
        """Dynamic int8 quantization of the transformer's linear layers, in place (CPU only).

        Weights are quantized once, with one scale per output channel (per-tensor scales cost
        STSb dev 0.7 Spearman points, per-channel 0.4); activations are quantized at run
        time with one scale per batch (torch's dynamic quantization), so a text's vector can
        move slightly (cosine > 0.99) with the other texts in its batch. Use float32 where
        bit-for-bit reproducible vectors matter.
        """
        if scheme != "int8":
            raise ValueError(f"Unknown quantization {scheme!r}; only 'int8' is supported.")
        if self.device.type != "cpu":
            raise ValueError("int8 dynamic quantization runs on the CPU; load with device='cpu'.")
        if self.compile_requested:
            raise ValueError(
                "This encoder runs through torch.compile; quantize a float encoder that is not "
                "compiled (compile and int8 do not combine)."
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's deprecation notice, not actionable here
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            self.transformer = quantize_dynamic(
                self.transformer, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
            )
        self.quantized = scheme
        return self

    def save(self, directory: str | Path) -> None:
        """Write a sentence-transformers directory (legacy module types, safetensors weights)."""
        if self.quantized:
            raise ValueError(
                "A quantized encoder cannot be saved; save the float model and pass "
                "quantize='int8' when loading it."
            )
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.transformer.save_pretrained(directory, safe_serialization=True)
        self._hf_tokenizer.save_pretrained(directory)
        modules: list[dict[str, Any]] = [
            {"idx": 0, "name": "0", "path": "", "type": LEGACY_MODULE_TYPES["transformer"]}
        ]

        def add(kind: str, folder: str) -> Path:
            index = len(modules)
            path = f"{index}_{folder}"
            modules.append(
                dict(idx=index, name=str(index), path=path, type=LEGACY_MODULE_TYPES[kind])
            )
            return directory / path

        pooling_dir = add("pooling", "Pooling")
        pooling_dir.mkdir(exist_ok=True)
        _write_json(pooling_dir / "config.json", _legacy_pooling_config(self.pooling))
        for dense in self.dense:
            dense_dir = add("dense", "Dense")
            dense.save(dense_dir)
            _write_json(dense_dir / "config.json", dense.get_config())
        if self.normalize_output:
            add("normalize", "Normalize").mkdir(exist_ok=True)
        _write_json(directory / "modules.json", modules)
        _write_json(
            directory / "sentence_bert_config.json",
            {"max_seq_length": self.max_seq_length, "do_lower_case": self.spec.do_lower_case},
        )
        _write_json(
            directory / "config_sentence_transformers.json",
            {
                "prompts": self.prompts,
                "default_prompt_name": self.default_prompt_name,
                "similarity_fn_name": self.similarity_fn_name,
            },
        )

    def copy(self) -> SentenceEncoder:
        """An independent deep copy (training works on one, so the original is never changed)."""
        return copy.deepcopy(self)

    # ---------------------------------------------------------------- properties
    @property
    def dimensions(self) -> int:
        if len(self.dense):
            return self.dense[-1].out_features
        return self.pooling.output_dimension

    @property
    def max_seq_length(self) -> int:
        return self.tokenizer.max_seq_length

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters(), torch.empty(0)).device

    # ---------------------------------------------------------------- the network
    def tokenize(self, texts: Sequence[str], prompt: str | None = None) -> dict[str, torch.Tensor]:
        """A padded batch for ``forward``: ``input_ids`` and ``attention_mask`` on the device."""
        rows = self.tokenizer.truncated(_check_texts(texts), prompt)
        input_ids, mask = self.tokenizer.pad(rows, np.arange(len(rows)))
        prompt_length = self.tokenizer.prompt_length(prompt) if prompt else 0
        return self._features(input_ids, mask, prompt_length, self.device)

    @staticmethod
    def _features(
        input_ids: np.ndarray, mask: np.ndarray, prompt_length: int, device: torch.device
    ) -> dict[str, torch.Tensor]:
        """A padded batch as ``forward`` takes it (the prompt's length only when there is one)."""
        features = {
            "input_ids": torch.from_numpy(input_ids).to(device),
            "attention_mask": torch.from_numpy(mask).to(device),
        }
        if prompt_length:
            features["prompt_length"] = torch.tensor(prompt_length)
        return features

    def forward(self, features: dict[str, torch.Tensor], query: bool = False) -> torch.Tensor:
        """Sentence embeddings ``(batch, dimensions)`` for a batch from ``tokenize``.

        ``query=True``: the batch is one text encoded on its own (``encode`` of one text, as a
        search query is), which ``set_query_runtime`` may send through ONNX Runtime. The last
        text of a longer list stays on the path of its batches.
        """
        mask = features["attention_mask"]  # (batch, seq)
        ids = features["input_ids"]
        single = query and ids.shape[0] == 1 and ids.shape[1] >= 2
        graph = self._onnx_graph() if single else None
        if graph is not None:
            states = graph(ids, mask)  # (1, seq, hidden), float32
        else:
            states = self._inference_transformer(batch=ids.shape[0] > 1)(
                input_ids=ids, attention_mask=mask
            ).last_hidden_state  # (batch, seq, hidden)
        prompt_length = int(features["prompt_length"]) if "prompt_length" in features else 0
        embeddings = self.pooling(states, mask, prompt_length)  # (batch, hidden * modes)
        for dense in self.dense:
            embeddings = dense(embeddings)
        if self.normalize_output:
            embeddings = F.normalize(embeddings, p=2, dim=1)
        return embeddings

    # ---------------------------------------------------------------- inference
    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        normalize: bool = True,
        show_progress: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        long_text: LongText = "truncate",
        chunk_overlap: int = 32,
        max_chunks: int | None = None,
        threads: int | None = None,
        alone: bool = False,
    ) -> np.ndarray:
        """Encode texts into float32 vectors ``(n, dimensions)`` (``(dimensions,)`` for one str).

        Inputs are sorted by token count and batched so little compute goes to padding; the
        output keeps the input order. ``normalize=True`` returns unit vectors (cosine = dot).
        ``long_text="truncate"`` cuts each text at ``max_seq_length`` tokens, as
        sentence-transformers does; ``"chunk"`` encodes overlapping windows over the whole
        text and averages their unit vectors, so every part of a long document counts;
        ``max_chunks`` caps the windows of one text (the first ones count, the rest is ignored
        and not even tokenized), which bounds the time and memory any one text can take.
        ``threads`` sets torch's intra-op threads for this call only (see ``torch_threads``).
        ``alone=True`` encodes each text on its own, unpadded, through the path of one text
        (search queries: ``serving`` encodes every query so): its vector is then the same,
        bit for bit, in any list, where a batch's kernels can move it by 1e-3 in bf16.
        """
        single = isinstance(texts, str)
        items = _check_texts([texts] if single else texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if long_text not in ("truncate", "chunk"):
            raise ValueError(f"long_text must be 'truncate' or 'chunk', got {long_text!r}.")
        prompt = self._resolve_prompt(prompt_name, prompt)
        if not items:
            return np.empty((0, self.dimensions), dtype=np.float32)
        if long_text == "chunk":
            rows = self.tokenizer.windows(items, chunk_overlap, prompt, max_chunks)
        else:
            rows = self.tokenizer.truncated(items, prompt)
        prompt_length = self.tokenizer.prompt_length(prompt) if prompt else 0
        with torch_threads(threads):
            vectors = self._encode_rows(rows, batch_size, prompt_length, show_progress, alone)
        if long_text == "chunk":
            vectors = _average_windows(vectors, rows.owner, len(items))
        if normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors[0] if single else vectors

    def _resolve_prompt(self, prompt_name: str | None, prompt: str | None) -> str | None:
        if prompt is not None:
            return prompt
        name = prompt_name or self.default_prompt_name
        if name is None:
            return None
        if name not in self.prompts:
            raise ValueError(
                f"Unknown prompt_name {name!r}; this model has {sorted(self.prompts)}."
            )
        return self.prompts[name] or None

    def _encode_rows(
        self,
        rows: TokenRows,
        batch_size: int,
        prompt_length: int,
        show_progress: bool,
        alone: bool = False,
    ) -> np.ndarray:
        # Longest first: the peak memory shows up in the first batch, not at the end.
        order = np.argsort(-rows.lengths, kind="stable")
        output = np.empty((len(rows), self.dimensions), dtype=np.float32)
        batch_size = 1 if alone else batch_size  # alone: each row is a query of its own
        starts = range(0, len(rows), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Encoding", unit="batch")
        device = self.device
        was_training = self.training
        if was_training:  # eval() walks every module: skip it on the hot path when not needed
            self.eval()
        try:
            with torch.inference_mode():
                for start in starts:
                    index = order[start : start + batch_size]
                    # A lone text keeps its width (the single-query graph); batches are
                    # padded to a bucketed width, which bounds the shapes a worker sees.
                    bucket = self.pad_buckets and len(index) > 1
                    padded = self.tokenizer.pad(rows, index, bucket=bucket)
                    features = self._features(*padded, prompt_length, device)
                    query = alone or len(rows) == 1
                    output[index] = self.forward(features, query).float().cpu().numpy()
        finally:
            if was_training:
                self.train()
        return output


def _average_windows(vectors: np.ndarray, owner: np.ndarray, count: int) -> np.ndarray:
    """Mean of each text's unit-normalized window vectors."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    sums = np.zeros((count, vectors.shape[1]), dtype=np.float32)
    np.add.at(sums, owner, unit)
    return sums / np.bincount(owner, minlength=count)[:, None].astype(np.float32)


def _legacy_pooling_config(pooling: Pooling) -> dict[str, Any]:
    """Pooling config in the boolean-key form that every sentence-transformers release reads."""
    config: dict[str, Any] = {"word_embedding_dimension": pooling.embedding_dimension}
    for key, mode in LEGACY_POOLING_KEYS.items():
        config[key] = mode in pooling.modes
    if not pooling.include_prompt:  # older releases reject the key, so only write it when needed
        config["include_prompt"] = False
    return config


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
