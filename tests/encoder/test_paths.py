"""encoder.paths: the inference path chosen from the settings, the CPU and the host's compiler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from django_sbert.encoder.paths import (
    CpuFeatures,
    bf16_measured,
    choose_path,
    compiler_available,
    cpu_features,
)

AVX2_ONLY = CpuFeatures("AVX2", frozenset({"avx", "avx2", "fma"}), "AMD EPYC")
AVX512_NO_BF16 = CpuFeatures("AVX512", frozenset({"avx2", "avx512f", "avx512_vnni"}))
AVX512_BF16 = CpuFeatures("AVX512", frozenset({"avx2", "avx512f", "avx512_bf16"}), "Zen 4")
AMX = CpuFeatures("AVX512", frozenset({"avx2", "avx512f", "amx_tile", "amx_bf16"}), "SPR")
# A CPU with bf16 units under a torch build (or ATEN_CPU_CAPABILITY) that stops at AVX2.
BF16_FLAGS_AVX2_TORCH = CpuFeatures("AVX2", frozenset({"avx2", "avx512f", "avx512_bf16"}))
NO_SIMD = CpuFeatures("DEFAULT", frozenset())


@pytest.mark.parametrize("cpu", [AVX2_ONLY, AVX512_NO_BF16, BF16_FLAGS_AVX2_TORCH, NO_SIMD])
@pytest.mark.parametrize("role", ["query", "document", "both"])
def test_bf16_is_never_chosen_without_native_bf16(cpu, role):
    assert not cpu.native_bf16
    # Even if bf16 had been measured to keep quality: emulated bf16 is several times slower.
    path = choose_path(role, cpu=cpu, compiler=True, bf16_measured=True)
    assert path.dtype == "float32"
    assert "no native bf16" in path.reason


@pytest.mark.parametrize("cpu", [AVX512_BF16, AMX])
def test_bf16_on_native_bf16_only_when_measured_to_keep_quality(cpu):
    assert cpu.native_bf16
    assert choose_path("document", cpu=cpu, compiler=True, bf16_measured=True).dtype == "bfloat16"
    kept = choose_path("document", cpu=cpu, compiler=True, bf16_measured=False)
    assert kept.dtype == "float32" and "has native bf16, but" in kept.reason


def test_auto_compiles_on_a_cpu_with_a_compiler_per_role():
    web = choose_path("query", cpu=AVX2_ONLY, compiler=True)
    worker = choose_path("document", cpu=AVX2_ONLY, compiler=True)
    assert (web.compile, web.dtype, web.label) == (True, "float32", "compiled float32")
    assert "single-query" in web.reason and "batch" in worker.reason and worker.compile


def test_no_compiler_means_eager_with_the_reason():
    path = choose_path("query", cpu=AVX2_ONLY, compiler=False)
    assert not path.compile and "no C++ compiler" in path.reason and path.label == "eager float32"


def test_explicit_settings_win_over_auto():
    assert not choose_path("query", compile=False, cpu=AVX2_ONLY, compiler=True).compile
    # True is obeyed without a compiler found: the load then warns and falls back to eager.
    assert choose_path("query", compile=True, cpu=AVX2_ONLY, compiler=False).compile
    forced = choose_path("query", precision="bfloat16", cpu=AVX2_ONLY, compiler=True)
    assert forced.dtype == "bfloat16" and "PRECISION='bfloat16'" in forced.reason
    fp32 = choose_path("query", precision="float32", cpu=AMX, compiler=True, bf16_measured=True)
    assert fp32.dtype == "float32"


def test_int8_stays_opt_in_and_runs_eager():
    for cpu in (AVX2_ONLY, AMX):
        assert choose_path("document", cpu=cpu, compiler=True).quantize is None
    int8 = choose_path("document", quantize="int8", cpu=AMX, compiler=True, bf16_measured=True)
    assert (int8.compile, int8.dtype, int8.quantize, int8.label) == (
        False,
        "float32",
        "int8",
        "eager int8",
    )


def test_other_devices_run_eager_float32():
    path = choose_path("query", device="cuda:0", cpu=AMX, compiler=True, bf16_measured=True)
    assert (path.compile, path.dtype) == (False, "float32")


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="COMPILE must be"):
        choose_path("query", compile="yes", cpu=AVX2_ONLY, compiler=True)
    with pytest.raises(ValueError, match="PRECISION must be"):
        choose_path("query", precision="fp16", cpu=AVX2_ONLY, compiler=True)


def test_this_machine():
    """The real path here: torch's capability string and /proc/cpuinfo, never bf16 without it."""
    cpu = cpu_features()
    assert cpu.capability == torch.backends.cpu.get_cpu_capability()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        assert cpu.flags and cpu.flags <= set(cpuinfo.read_text().split())
    measured = bf16_measured("all-MiniLM-L6-v2")
    path = choose_path("document", cpu=cpu, compiler=compiler_available(), bf16_measured=measured)
    expected = "bfloat16" if cpu.native_bf16 and measured else "float32"
    assert path.dtype == expected, (cpu.describe(), path.reason)
    assert path.compile == compiler_available()
    # A model nobody measured in bf16 stays float32 here, whatever the CPU.
    unmeasured = choose_path(
        "document", cpu=cpu, compiler=True, bf16_measured=bf16_measured("/some/other/model")
    )
    assert unmeasured.dtype == "float32"


@pytest.mark.parametrize("cpu", [AVX2_ONLY, AVX512_NO_BF16, AVX512_BF16, AMX, NO_SIMD])
@pytest.mark.parametrize("role", ["query", "document", "both"])
def test_auto_sends_float32_single_queries_through_onnxruntime(cpu, role):
    # bf16 not measured for the model, or not native: the torch path would be float32.
    path = choose_path(role, cpu=cpu, compiler=True, bf16_measured=False, query_runtime="auto")
    assert path.query_runtime == "onnxruntime" and path.query_label == "onnxruntime float32"
    assert "single queries through ONNX Runtime" in path.reason
    # Batches keep the torch path chosen as before.
    assert path.compile and path.label == "compiled float32"


def test_auto_keeps_torch_for_queries_where_it_is_faster_or_onnxruntime_cannot_run():
    for cpu in (AVX512_BF16, AMX):
        bf16 = choose_path(
            "query", cpu=cpu, compiler=True, bf16_measured=True, query_runtime="auto"
        )
        assert bf16.query_runtime == "torch" and bf16.query_label == "compiled bfloat16"
        assert "single queries through torch in bfloat16" in bf16.reason
    missing = choose_path(
        "query",
        cpu=AVX2_ONLY,
        compiler=True,
        query_runtime="auto",
        onnxruntime_missing="onnxruntime is not installed (pip install onnxruntime)",
    )
    assert missing.query_runtime == "torch" and "pip install onnxruntime" in missing.reason
    for kwargs in ({"quantize": "int8"}, {"device": "cuda"}):
        path = choose_path("query", cpu=AVX2_ONLY, compiler=True, query_runtime="auto", **kwargs)
        assert path.query_runtime == "torch"
    # The library's default (a script without settings) is torch.
    assert choose_path("query", cpu=AVX2_ONLY, compiler=True).query_runtime == "torch"


@pytest.mark.parametrize(
    "runtime, label",
    [("onnxruntime", "onnxruntime float32"), ("onnxruntime-int8", "onnxruntime int8")],
)
def test_onnxruntime_asked_for_is_obeyed_or_refused_with_the_reason(runtime, label):
    forced = choose_path("query", cpu=AMX, compiler=True, query_runtime=runtime)
    assert forced.query_runtime == runtime and "QUERY_RUNTIME" in forced.reason
    assert forced.query_label == label and forced.label == "compiled float32"
    with pytest.raises(ValueError, match="unset QUANTIZE"):
        choose_path("query", cpu=AMX, compiler=True, quantize="int8", query_runtime=runtime)
    with pytest.raises(ValueError, match="on the CPU, not on cuda"):
        choose_path("query", cpu=AMX, compiler=True, device="cuda", query_runtime=runtime)
    with pytest.raises(ValueError, match="'auto', 'torch', 'onnxruntime', 'onnxruntime-int8'"):
        choose_path("query", cpu=AMX, compiler=True, query_runtime="onnx")
