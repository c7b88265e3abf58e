"""fit()'s precision: bfloat16 autocast only where the CPU has native bf16, float32 weights,
optimizer and loss whatever the precision, and a bad value refused before training."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from django_sbert.encoder.paths import CpuFeatures, cpu_features
from django_sbert.encoder.training import PRECISIONS, fit, training_precision
from tests.encoder.test_training import TOPICS

SAPPHIRE_RAPIDS = CpuFeatures("AVX512", frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}))
ZEN4 = CpuFeatures("AVX512", frozenset({"avx2", "avx512f", "avx512_bf16"}))
AVX2_ONLY = CpuFeatures("AVX2", frozenset({"avx2"}))
AVX512_NO_BF16 = CpuFeatures("AVX512", frozenset({"avx2", "avx512f"}))
# A CPU with AMX, but a torch build (or ATEN_CPU_CAPABILITY) that stops at AVX2.
AMX_CAPPED_AT_AVX2 = CpuFeatures("AVX2", frozenset({"avx2", "avx512f", "amx_bf16"}))

native_bf16 = pytest.mark.skipif(
    not cpu_features().native_bf16, reason="this CPU has no native bf16 (AVX-512 BF16 or AMX)"
)


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        (SAPPHIRE_RAPIDS, "bfloat16"),
        (ZEN4, "bfloat16"),
        (AVX2_ONLY, "float32"),
        (AVX512_NO_BF16, "float32"),
        (AMX_CAPPED_AT_AVX2, "float32"),
    ],
)
def test_auto_is_bfloat16_only_with_native_bf16(cpu, expected):
    assert training_precision("auto", "cpu", cpu) == expected


@pytest.mark.parametrize("cpu", [SAPPHIRE_RAPIDS, AVX2_ONLY])
def test_explicit_precision_is_taken_as_given(cpu):
    assert training_precision("float32", "cpu", cpu) == "float32"
    assert training_precision("bfloat16", "cpu", cpu) == "bfloat16"


def test_auto_keeps_float32_on_other_devices():
    assert training_precision("auto", "cuda", SAPPHIRE_RAPIDS) == "float32"
    assert training_precision("auto", torch.device("cuda", 0), SAPPHIRE_RAPIDS) == "float32"


def test_unknown_precision_names_the_choices(tiny_encoder):
    with pytest.raises(ValueError, match="auto, float32, bfloat16.*'fp16'"):
        training_precision("fp16", "cpu", SAPPHIRE_RAPIDS)
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bfloat16"):
        fit(tiny_encoder, [("a b", "c d"), ("e f", "g h")], loss="mnrl", precision="half")
    assert PRECISIONS == ("auto", "float32", "bfloat16")


def mnrl_pairs() -> list[tuple[str, str]]:
    rng = random.Random(2)
    anchors = [(t, " ".join(rng.sample(TOPICS[t], 3))) for t in range(6) for _ in range(8)]
    return [(text, " ".join(rng.sample(TOPICS[t], 3))) for t, text in anchors]


def watch_linears(encoder) -> list[tuple[torch.dtype, bool]]:
    """The dtype of every nn.Linear output, and whether grad was on, in the order they ran.

    A plain function as the hook: ``copy()`` (the copy ``fit`` trains) deep-copies the hooks,
    and a function is shared by the copy, where a callable object would be copied too.
    """
    seen: list[tuple[torch.dtype, bool]] = []

    def hook(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
        seen.append((output.dtype, torch.is_grad_enabled()))

    for module in encoder.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(hook)
    return seen


@native_bf16
def test_bfloat16_fit_runs_under_autocast_with_float32_weights(tiny_model_dir):
    from django_sbert.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(tiny_model_dir)
    outputs = watch_linears(encoder)
    evaluated: list[torch.dtype] = []

    def evaluator(model) -> float:
        # encode() runs under inference mode: the autocast of fit must reach it too.
        before = len(outputs)
        vectors = model.encode(["bank rate", "cat dog", "vote party"])
        evaluated.extend(dtype for dtype, _ in outputs[before:])
        return float(-np.abs(vectors).sum())

    result = fit(
        encoder,
        mnrl_pairs(),
        loss="mnrl",
        epochs=4,
        batch_size=6,
        learning_rate=1e-3,
        evaluator=evaluator,
        eval_every=8,
        precision="bfloat16",
    )
    assert result.precision == "bfloat16"
    training = [dtype for dtype, grad in outputs if grad]
    assert training and set(training) == {torch.bfloat16}
    assert evaluated and set(evaluated) == {torch.bfloat16}
    # Master weights stay float32, in the run and in the copy returned.
    assert {p.dtype for p in result.encoder.parameters()} == {torch.float32}
    losses = [h["loss"] for h in result.loss_history]
    assert all(np.isfinite(losses))
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.2
    # Outside fit, the trained copy encodes in float32 again.
    del outputs[:]
    vectors = result.encoder.encode(["bank rate"])
    assert vectors.dtype == np.float32 and {d for d, _ in outputs} == {torch.float32}


def test_float32_fit_never_autocasts(tiny_model_dir):
    from django_sbert.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(tiny_model_dir)
    outputs = watch_linears(encoder)
    result = fit(encoder, mnrl_pairs(), loss="mnrl", batch_size=6, precision="float32")
    assert result.precision == "float32"
    assert outputs and {dtype for dtype, _ in outputs} == {torch.float32}


@native_bf16
def test_an_encoder_loaded_in_bf16_trains_float32_master_weights(tiny_model_dir):
    from django_sbert.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(tiny_model_dir, dtype="bfloat16")
    result = fit(encoder, mnrl_pairs(), loss="mnrl", batch_size=6, learning_rate=1e-3)
    assert result.precision == "bfloat16"  # "auto" on a CPU with native bf16
    assert {p.dtype for p in result.encoder.parameters()} == {torch.float32}
    assert {p.dtype for p in encoder.transformer.parameters()} == {torch.bfloat16}  # untouched
