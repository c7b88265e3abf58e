"""What the encoder does not implement fails at load (and in describe()) with a clear message
that names the model's architecture and the missing piece, never with wrong vectors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from django_sbert.encoder import SentenceEncoder, UnsupportedModelError, describe
from django_sbert.encoder.spec import module_kind
from tests.encoder.tiny_families import write_json


@pytest.fixture
def model(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A writable copy of the tiny BERT (mean pooling, Normalize)."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))


def edit_json(path: Path, change) -> None:
    payload = json.loads(path.read_text())
    write_json(path, change(payload) or payload)


def refusal(path: Path, *, at_load_only: bool = False) -> str:
    """The UnsupportedModelError message for ``path``, checking describe() agrees."""
    if not at_load_only:
        with pytest.raises(UnsupportedModelError) as described:
            describe(path)
    with pytest.raises(UnsupportedModelError) as loaded:
        SentenceEncoder.load(path)
    message = str(loaded.value)
    if not at_load_only:
        assert str(described.value) == message
    assert isinstance(loaded.value, ValueError)  # callers that catch ValueError keep working
    return message


@pytest.mark.parametrize(
    "type_name",
    [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.base.modules.transformer.Transformer",
        "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
        "sentence_transformers.base.modules.dense.Dense",
        "sentence_transformers.base.modules.normalize.Normalize",
    ],
)
def test_every_spelling_of_the_modules_we_implement_is_read(type_name):
    assert module_kind(type_name) == type_name.rpartition(".")[2].lower()


@pytest.mark.parametrize(
    "type_name",
    [
        "sentence_transformers.models.LayerNorm",
        "sentence_transformers.models.WordEmbeddings",
        "sentence_transformers.sentence_transformer.modules.static_embedding.StaticEmbedding",
        "my_package.modules.Pooling",  # custom code, even under a familiar class name
    ],
)
def test_module_type_we_do_not_implement(model, type_name):
    def swap(modules):
        modules[2] = {**modules[2], "type": type_name}

    edit_json(model / "modules.json", swap)
    message = refusal(model)
    assert "BertModel (model_type 'bert')" in message
    assert type_name in message and "does not implement" in message


def test_unknown_pooling_mode(model):
    write_json(
        model / "1_Pooling/config.json", {"embedding_dimension": 32, "pooling_mode": "attention"}
    )
    message = refusal(model)
    assert "BertModel" in message and "['attention']" in message and "lasttoken" in message


def test_modules_out_of_order(model):
    def normalize_first(modules):
        modules[1], modules[2] = (
            {**modules[2], "idx": 1},
            {**modules[1], "idx": 2},
        )

    edit_json(model / "modules.json", normalize_first)
    message = refusal(model)
    assert "Transformer -> Normalize -> Pooling" in message and "SentenceEncoder runs" in message


def test_dense_on_token_embeddings(model):
    (model / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            ]
        )
    )
    write_json(
        model / "2_Dense/config.json",
        {"in_features": 32, "out_features": 8, "module_input_name": "token_embeddings"},
    )
    assert "'token_embeddings'" in refusal(model)
    write_json(model / "2_Dense/config.json", {"in_features": 32, "out_features": 8, "gate": 1})
    assert "['gate']" in refusal(model)


def test_transformer_task_other_than_feature_extraction(model):
    edit_json(
        model / "sentence_bert_config.json",
        lambda config: {**config, "transformer_task": "text-generation"},
    )
    assert "'text-generation'" in refusal(model)


def test_architecture_transformers_does_not_ship(model):
    """nomic-embed-text's shape: a model type only the model repository's code implements."""
    edit_json(
        model / "config.json",
        lambda config: {
            **config,
            "model_type": "nomic_bert",
            "architectures": ["NomicBertModel"],
            "auto_map": {
                "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"
            },
        },
    )
    message = refusal(model)
    assert "NomicBertModel (model_type 'nomic_bert')" in message
    assert "code shipped with the model" in message and "never runs code" in message


def test_model_type_unknown_to_installed_transformers(model, capfd):
    edit_json(
        model / "config.json",
        lambda config: {**config, "model_type": "future_bert", "architectures": ["FutureBert"]},
    )
    capfd.readouterr()
    message = refusal(model, at_load_only=True)  # describe() reads JSON, not transformers
    assert capfd.readouterr().err == ""  # refused before transformers logs about it
    assert describe(model).dimensions == 32
    assert "FutureBert (model_type 'future_bert')" in message
    assert "does not implement this architecture" in message


def test_known_model_type_with_custom_code(model):
    """jina-embeddings-v2's shape: model_type 'bert' but AutoModel mapped to its own code."""
    edit_json(
        model / "config.json",
        lambda config: {
            **config,
            "auto_map": {
                "AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel"
            },
        },
    )
    assert "jinaai/jina-bert-implementation" in refusal(model)


def test_encoder_decoder(model):
    edit_json(
        model / "config.json",
        lambda config: {
            **config,
            "model_type": "t5",
            "architectures": ["T5EncoderModel"],
            "is_encoder_decoder": True,
            "d_model": 32,
        },
    )
    message = refusal(model)
    assert "T5EncoderModel (model_type 't5')" in message and "encoder-decoder" in message
