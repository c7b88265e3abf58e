"""The single-query graph kept on disk (encoder/aot.py): a new process loads it without tracing
or compiling, a damaged entry is rebuilt with one warning, and every version of an
architecture shares one entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from django_sbert.encoder import SentenceEncoder, aot
from django_sbert.encoder.paths import compiler_available

pytestmark = [
    pytest.mark.skipif(not compiler_available(), reason="no C++ compiler"),
    pytest.mark.heavy,
]

QUERY = "central banks raise interest rates"

# A fresh process: load with the cache, encode one query, report what it built and the vector.
FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    from torch._dynamo.utils import counters
    from django_sbert.encoder import SentenceEncoder, aot

    encoder = SentenceEncoder.load(sys.argv[1], compile=True, compile_cache=sys.argv[2])
    vector = encoder.encode(sys.argv[3])
    print("RESULT " + json.dumps({
        "graphs": counters["stats"]["unique_graphs"],
        "stats": dict(aot.stats),
        "package": str(encoder._compiled.query_package),
        "vector": vector.tolist(),
    }))
    """
)


def fresh_process(model: Path, cache: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(model), str(cache), QUERY],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory, tiny_model_dir) -> tuple[Path, dict]:
    """A cache directory the first fresh process filled, and what that process reported."""
    cache = tmp_path_factory.mktemp("compile-cache")
    first = fresh_process(tiny_model_dir, cache)
    return cache, first


def test_a_fresh_process_with_a_warm_cache_compiles_nothing(
    warm_cache, tiny_model_dir, tiny_encoder
):
    cache, first = warm_cache
    assert first["stats"] == {"built": 1}  # the cold cache: built and stored
    assert Path(first["package"]).parent == cache
    second = fresh_process(tiny_model_dir, cache)
    assert second["stats"] == {"loaded": 1}  # nothing built, no rebuild
    assert second["graphs"] == 0  # and no Dynamo graph traced either
    assert second["package"] == first["package"]
    expected = tiny_encoder.encode(QUERY)
    np.testing.assert_allclose(second["vector"], expected, atol=1e-5)
    np.testing.assert_allclose(first["vector"], expected, atol=1e-5)


def test_single_texts_of_any_length_match_eager(warm_cache, tiny_model_dir, tiny_encoder):
    cache, _ = warm_cache
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True, compile_cache=cache)
    texts = ["", "x", QUERY, "Central banks raised interest rates again. " * 40]
    vectors = np.stack([encoder.encode(text) for text in texts])
    np.testing.assert_allclose(vectors, tiny_encoder.encode(texts), atol=1e-5)
    assert encoder._compiled.query_package is not None
    # Another thread count gives the same vectors (the kernels follow the caller's).
    again = np.stack([encoder.encode(text, threads=1) for text in texts])
    np.testing.assert_allclose(again, vectors, atol=1e-6)


def test_another_version_of_the_architecture_reuses_the_entry(warm_cache, tiny_model_dir, tmp_path):
    cache, first = warm_cache
    tuned = SentenceEncoder.load(tiny_model_dir)
    with torch.no_grad():
        for parameter in tuned.transformer.parameters():
            parameter.mul_(1.3)
    tuned.save(tmp_path / "tuned")
    before = dict(aot.stats)
    version = SentenceEncoder.load(tmp_path / "tuned", compile=True, compile_cache=cache)
    vector = version.encode(QUERY)
    assert aot.stats["built"] == before.get("built", 0)  # nothing compiled for the version
    assert aot.stats["loaded"] == before.get("loaded", 0) + 1
    assert str(version._compiled.query_package) == first["package"]
    eager = SentenceEncoder.load(tmp_path / "tuned").encode(QUERY)
    np.testing.assert_allclose(vector, eager, atol=1e-5)  # its own weights
    assert np.abs(vector - np.asarray(first["vector"])).max() > 1e-3


def age(path: Path, days: float) -> Path:
    """Set ``path``'s modification time ``days`` ago (creating an empty file if needed)."""
    path.touch()
    then = time.time() - days * 86400
    os.utime(path, (then, then))
    return path


DENSE = "encoder.layer.0.output.dense"  # a linear layer of the tiny BERT


def test_weights_replaced_after_loading_are_the_ones_used(warm_cache, tiny_model_dir):
    """The package reads the transformer's tensors by address: tensors replaced since (not
    changed in place) are handed to it again before the next query."""
    cache, _ = warm_cache
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True, compile_cache=cache)
    before = encoder.encode(QUERY)
    with torch.no_grad():
        for parameter in encoder.transformer.parameters():
            parameter.data = parameter.data * 1.3  # new storage, as .to() gives
    after = encoder.encode(QUERY)
    eager = SentenceEncoder.load(tiny_model_dir)
    with torch.no_grad():
        for parameter in eager.transformer.parameters():
            parameter.mul_(1.3)
    np.testing.assert_allclose(after, eager.encode(QUERY), atol=1e-5)
    assert np.abs(after - before).max() > 1e-3
    # A parameter replaced whole (a new nn.Parameter assigned to the attribute) too.
    for model in (encoder, eager):
        dense = model.transformer.get_submodule(DENSE)
        dense.weight = torch.nn.Parameter(dense.weight.detach() * 0.5)
    replaced = encoder.encode(QUERY)
    np.testing.assert_allclose(replaced, eager.encode(QUERY), atol=1e-5)
    assert np.abs(replaced - after).max() > 1e-3


def test_a_damaged_entry_warns_and_is_rebuilt(warm_cache, tiny_model_dir, tiny_encoder):
    cache, first = warm_cache
    package = Path(first["package"])
    # Left by a torch upgrade long ago: the rebuild below prunes it, and only it.
    stale = age(cache / "query-0123456789abcdef0123456789abcdef.pt2", aot.UNUSED_DAYS + 1)
    age(stale.with_suffix(".lock"), aot.UNUSED_DAYS + 1)
    data = bytearray(package.read_bytes())
    package.write_bytes(bytes(data[: len(data) // 2]))  # a half-written copy, say
    before = dict(aot.stats)
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True, compile_cache=cache)
    with pytest.warns(RuntimeWarning, match="cannot be used.*compiled again"):
        vector = encoder.encode(QUERY)
    assert aot.stats["rebuilt"] == before.get("rebuilt", 0) + 1
    assert aot.stats["built"] == before.get("built", 0) + 1
    assert encoder.compiled and encoder._compiled.query_package == package
    np.testing.assert_allclose(vector, tiny_encoder.encode(QUERY), atol=1e-5)
    assert package.stat().st_size >= len(data) // 2 + 1  # a whole package again
    assert not stale.exists() and not stale.with_suffix(".lock").exists()
    # The next process loads the rebuilt entry as it is.
    assert fresh_process(tiny_model_dir, cache)["stats"] == {"loaded": 1}


def test_loading_an_entry_marks_it_used(warm_cache, tiny_model_dir):
    cache, first = warm_cache
    package = age(Path(first["package"]), aot.UNUSED_DAYS - 1)
    SentenceEncoder.load(tiny_model_dir, compile=True, compile_cache=cache).encode(QUERY)
    assert time.time() - package.stat().st_mtime < 600
    assert aot.prune(cache) == []  # just used: kept


def test_prune_deletes_unused_packages_and_abandoned_builds(tmp_path):
    old = age(tmp_path / "query-old.pt2", aot.UNUSED_DAYS + 1)
    old_lock = age(tmp_path / "query-old.lock", aot.UNUSED_DAYS + 1)
    recent = age(tmp_path / "query-recent.pt2", aot.UNUSED_DAYS - 1)
    kept = age(tmp_path / "query-kept.pt2", aot.UNUSED_DAYS + 5)
    abandoned = age(tmp_path / ".building-abc.pt2", aot.ABANDONED_BUILD_HOURS / 24 + 0.1)
    building = age(tmp_path / ".building-def.pt2", 0)
    other = age(tmp_path / "notes.txt", 400)  # not ours: never touched
    assert sorted(aot.prune(tmp_path, keep=kept)) == sorted([old, abandoned])
    assert not old.exists() and not old_lock.exists() and not abandoned.exists()
    assert recent.exists() and kept.exists() and building.exists() and other.exists()


def test_an_entry_with_wrong_output_is_rebuilt(warm_cache, tiny_model_dir, monkeypatch):
    """A package that loads but computes something else (built for another model under a
    colliding key, say) is caught by the probe and rebuilt."""
    cache, _ = warm_cache
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True, compile_cache=cache)
    real_call = aot.QueryGraph.__call__
    calls = []

    def wrong_once(self, input_ids, attention_mask):
        calls.append(1)
        states = real_call(self, input_ids, attention_mask)
        return states + 1.0 if len(calls) == 1 else states

    monkeypatch.setattr(aot.QueryGraph, "__call__", wrong_once)
    with pytest.warns(RuntimeWarning, match="differs from the model's"):
        vector = encoder.encode(QUERY)
    monkeypatch.undo()
    np.testing.assert_allclose(
        vector, SentenceEncoder.load(tiny_model_dir).encode(QUERY), atol=1e-5
    )


def test_the_key_ignores_the_weights_but_not_the_architecture(tiny_model_dir):
    base = SentenceEncoder.load(tiny_model_dir).transformer
    other = SentenceEncoder.load(tiny_model_dir).transformer
    with torch.no_grad():
        next(other.parameters()).add_(1.0)
    other.config._name_or_path = "/somewhere/else"
    assert aot.package_key(base) == aot.package_key(other)
    wider = SentenceEncoder.load(tiny_model_dir, dtype="bfloat16").transformer
    assert aot.package_key(wider) != aot.package_key(base)
    other.config.hidden_act = "relu"
    assert aot.package_key(other) != aot.package_key(base)


def test_no_cache_keeps_torch_compile(tiny_model_dir):
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True)
    encoder.encode(QUERY)
    assert encoder.compiled and encoder._compiled.query_package is None


def test_a_package_that_fails_after_its_build_falls_back_to_torch_compile(
    tmp_path, tiny_model_dir, monkeypatch
):
    """A package built here that does not pass its probe is not an error of the caller's: the
    query is answered (through ``torch.compile``) and no later query builds again."""
    encoder = SentenceEncoder.load(tiny_model_dir, compile=True, compile_cache=tmp_path)
    real_call = aot.QueryGraph.__call__

    def always_wrong(self, input_ids, attention_mask):
        return real_call(self, input_ids, attention_mask) + 1.0

    monkeypatch.setattr(aot.QueryGraph, "__call__", always_wrong)
    before = dict(aot.stats)
    with pytest.warns(RuntimeWarning, match="could not be compiled ahead of time"):
        vector = encoder.encode(QUERY)
    encoder.encode("a second query")
    assert aot.stats["built"] == before.get("built", 0) + 1  # once, not once per query
    monkeypatch.undo()
    np.testing.assert_allclose(
        vector, SentenceEncoder.load(tiny_model_dir).encode(QUERY), atol=1e-5
    )
