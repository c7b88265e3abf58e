"""Static int8 through PT2E and Inductor, for ``benchmarks.encode --int8-static`` (a measurement).

The app's int8 (``QUANTIZE="int8"``) is torch's eager dynamic quantization: int8 weights,
activations quantized per batch at run time. This is the other int8 torch offers on a CPU:
the transformer exported with ``torch.export``, annotated by torchao's
``X86InductorQuantizer`` (int8 weights per channel, int8 activations with scales calibrated
on sample texts), converted and compiled by Inductor with frozen weights, which lowers the
linear layers to oneDNN's int8 kernels (VNNI, and AMX int8 tiles where the CPU has them).

It answers one question: do int8 kernels make the encoder 4x faster than
sentence-transformers' float32? It is not a path of the app: it needs torchao, calibration
texts, and a compile per model (the weights are frozen into the graph).

torchao is not a dependency of the project. Install it beside the venv, not into it
(transformers imports torchao whenever it is importable)::

    .venv/bin/pip install --no-deps --target artifacts/torchao torchao==0.18.0
    PYTHONPATH=artifacts/torchao .venv/bin/python -m benchmarks.encode --int8-static
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.aot import QueryModule
from django_sbert.encoder.compiled import QueryOutput


class _QuantizedTransformer(nn.Module):
    """Stands in for ``SentenceEncoder.transformer``: the same call, the int8 graph behind it.

    ``encode()`` keeps doing everything else (length sorting, bucketed padding, pooling,
    normalization), so the comparison with the other variants is of the network alone.
    """

    def __init__(self, compiled: Any, config: Any, bf16: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.config = config
        self.bf16 = bf16

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> QueryOutput:
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        )
        with autocast:
            return QueryOutput(self.compiled(input_ids, attention_mask).float())


def _skip_partitions_without_output(quantizer_module: Any) -> None:
    """Work around torchao 0.18 failing on BERT's GELU: its ``linear -> unary`` fusion search
    finds a GELU partition with no output node and indexes into it (IndexError). Such
    matches are dropped; those linear layers are still quantized, without the fused GELU."""
    find = quantizer_module.find_sequential_partitions

    def find_with_outputs(gm: Any, partition_types: Any, *args: Any, **kwargs: Any) -> list:
        return [
            match
            for match in find(gm, partition_types, *args, **kwargs)
            if all(len(partition.output_nodes) == 1 for partition in match)
        ]

    quantizer_module.find_sequential_partitions = find_with_outputs


def static_int8(
    model: Any,
    calibration: Sequence[str],
    *,
    bf16: bool = False,
    attention: str | None = None,
    batch_size: int = 32,
) -> SentenceEncoder:
    """``model`` loaded as float32, its transformer replaced by the calibrated int8 graph.

    ``bf16``: run the layers int8 kernels do not cover (attention, layer norm, GELU) in bf16
    (torchao's "int8 mixed bf16"), for CPUs with native bf16. ``attention``: the
    transformers attention to export (``"eager"``: matrix products and a softmax; default: the
    model's, sdpa for BERT).
    """
    try:
        import torch._inductor.config as inductor_config
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError as exc:
        raise SystemExit(
            f"--int8-static needs torchao ({exc}); see benchmarks/_int8_static.py for the install"
        ) from exc

    encoder = SentenceEncoder.load(model)
    if attention is not None:
        encoder.transformer.set_attn_implementation(attention)
    first = encoder.tokenize(list(calibration[:batch_size]))
    batch = torch.export.Dim("batch", min=2, max=4096)
    length = torch.export.Dim("length", min=2, max=encoder.max_seq_length)
    shapes = ({0: batch, 1: length}, {0: batch, 1: length})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # export's and torchao's notices, not actionable here
        exported = torch.export.export(
            QueryModule(encoder.transformer).eval(),  # (input_ids, mask) -> token states
            (first["input_ids"], first["attention_mask"]),
            dynamic_shapes=shapes,
        ).module()
        _skip_partitions_without_output(xiq)
        quantizer = xiq.X86InductorQuantizer()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
        prepared = prepare_pt2e(exported, quantizer)
        with torch.no_grad():  # calibration: observers record each activation's range
            for start in range(0, len(calibration), batch_size):
                features = encoder.tokenize(list(calibration[start : start + batch_size]))
                prepared(features["input_ids"], features["attention_mask"])
        converted = convert_pt2e(prepared)
    inductor_config.freezing = True  # int8 weights pre-packed: what the int8 kernels need
    compiled = torch.compile(converted, dynamic=True)
    encoder.transformer = _QuantizedTransformer(compiled, encoder.transformer.config, bf16)
    return encoder
