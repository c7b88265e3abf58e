"""Tiny random sentence encoders of every model family docs/encoder.md claims.

Each builder writes a complete sentence-transformers directory in the legacy layout most Hub
models still carry (``modules.json`` with ``sentence_transformers.models.*`` types,
``sentence_bert_config.json``, ``1_Pooling/config.json`` with the boolean keys, ``N_Dense/``
with its own weights, ``config_sentence_transformers.json``), around a 2-layer, 32-wide
random transformer and a matching fast tokenizer. Dense weights are written here with
safetensors directly, not through our ``Dense``, so a test comparing with
sentence-transformers checks our reading of the format rather than our own writing of it.
The vectors mean nothing; only their equality with sentence-transformers' does.
"""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.tiny_model import COMMON_WORDS, build_tiny_model

HIDDEN = 32
MAX_SEQ_LENGTH = 24  # short, so ordinary test sentences run past it
TANH = "torch.nn.modules.activation.Tanh"
IDENTITY = "torch.nn.modules.linear.Identity"


def write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2), encoding="utf-8")


def _legacy_pooling(modes: tuple[str, ...], include_prompt: bool) -> dict[str, Any]:
    keys = {
        "cls": "pooling_mode_cls_token",
        "max": "pooling_mode_max_tokens",
        "mean": "pooling_mode_mean_tokens",
        "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
        "weightedmean": "pooling_mode_weightedmean_tokens",
        "lasttoken": "pooling_mode_lasttoken",
    }
    config: dict[str, Any] = {"word_embedding_dimension": HIDDEN}
    config.update({key: mode in modes for mode, key in keys.items()})
    if not include_prompt:
        config["include_prompt"] = False
    return config


def _write_dense(
    directory: Path,
    in_features: int,
    out_features: int,
    *,
    bias: bool,
    activation: str,
    use_residual: bool,
    seed: int,
) -> None:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    weights = {"linear.weight": torch.randn(out_features, in_features, generator=generator) / 4}
    if bias:
        weights["linear.bias"] = torch.randn(out_features, generator=generator) / 4
    if use_residual and in_features != out_features:
        weights["residual.weight"] = torch.randn(out_features, in_features, generator=generator) / 4
    directory.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(directory / "model.safetensors"))
    config: dict[str, Any] = {
        "in_features": in_features,
        "out_features": out_features,
        "bias": bias,
        "activation_function": activation,
    }
    if use_residual:
        config["use_residual"] = True
    write_json(directory / "config.json", config)


def write_pipeline(
    directory: Path,
    *,
    pooling: tuple[str, ...] = ("mean",),
    dense: tuple[dict[str, Any], ...] = (),
    normalize: bool = True,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    include_prompt: bool = True,
    max_seq_length: int = MAX_SEQ_LENGTH,
    do_lower_case: bool = False,
) -> Path:
    """(Re)write the sentence-transformers files around the transformer in ``directory``.

    ``dense`` holds one dict per Dense layer: ``out_features`` and optionally ``bias``,
    ``activation``, ``use_residual``.
    """
    for old in directory.glob("[0-9]_*"):
        shutil.rmtree(old)
    modules: list[dict[str, Any]] = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
    ]

    def add(kind: str) -> Path:
        index = len(modules)
        folder = f"{index}_{kind}"
        modules.append(
            {
                "idx": index,
                "name": str(index),
                "path": folder,
                "type": f"sentence_transformers.models.{kind}",
            }
        )
        return directory / folder

    write_json(add("Pooling") / "config.json", _legacy_pooling(pooling, include_prompt))
    width = HIDDEN * len(pooling)
    for number, layer in enumerate(dense):
        _write_dense(
            add("Dense"),
            width,
            layer["out_features"],
            bias=layer.get("bias", True),
            activation=layer.get("activation", TANH),
            use_residual=layer.get("use_residual", False),
            seed=100 + number,
        )
        width = layer["out_features"]
    if normalize:
        add("Normalize").mkdir(parents=True)
    write_json(directory / "modules.json", modules)
    write_json(
        directory / "sentence_bert_config.json",
        {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case},
    )
    write_json(
        directory / "config_sentence_transformers.json",
        {
            "prompts": prompts or {},
            "default_prompt_name": default_prompt_name,
            "similarity_fn_name": "cosine",
        },
    )
    return directory


def mpnet_vocab() -> list[str]:
    """MPNet's special tokens where the real vocabulary has them (``<pad>`` must be id 1:
    MPNet numbers positions from its padding id), then characters, word pieces and words."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = [f"##{c}" for c in string.ascii_lowercase + string.digits]
    return specials + chars + pieces + sorted(set(COMMON_WORDS))


def build_tiny_bert(directory: Path, *, seed: int = 0) -> Path:
    """The random BERT of ``tests/tiny_model.py`` (pipeline files are rewritten by callers)."""
    return build_tiny_model(directory, max_seq_length=MAX_SEQ_LENGTH, seed=seed)


def build_tiny_mpnet(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer, 32-wide random MPNet (the all-mpnet-base-v2 architecture) and tokenizer."""
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = mpnet_vocab()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # Positional: transformers 4 calls it vocab_file, transformers 5 calls it vocab.
    tokenizer = MPNetTokenizerFast(str(directory / "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = MPNetConfig(
        vocab_size=len(vocab),
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,  # 128 positions after MPNet's padding offset
    )
    MPNetModel(config).save_pretrained(directory, safe_serialization=True)
    return directory


def build_tiny_distilbert(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer, 32-wide random DistilBERT (msmarco-distilbert, distiluse) with BERT's vocab."""
    import torch
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizerFast

    from tests.tiny_model import build_vocab

    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = DistilBertTokenizerFast(str(directory / "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = DistilBertConfig(
        vocab_size=len(vocab),
        dim=HIDDEN,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=128,
    )
    DistilBertModel(config).save_pretrained(directory, safe_serialization=True)
    return directory


def build_tiny_xlm_roberta(directory: Path, *, seed: int = 0) -> Path:
    """A 2-layer, 32-wide random XLM-RoBERTa (the multilingual family: paraphrase-multilingual,
    multilingual-e5) with a small Unigram tokenizer in XLM-R's layout (``<pad>`` is id 1)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaModel

    directory.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    words = [f"\u2581{word}" for word in sorted(set(COMMON_WORDS))]
    chars = ["\u2581", *string.ascii_letters, *string.digits, *string.punctuation, "é", "ü"]
    pieces = [(token, 0.0) for token in specials]
    pieces += [(word, -5.0) for word in words] + [(char, -10.0) for char in chars]
    pieces.append(("<mask>", 0.0))
    backend = Tokenizer(models.Unigram(pieces, unk_id=3, byte_fallback=False))
    backend.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=128,
    )
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = XLMRobertaConfig(
        vocab_size=len(pieces),
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,  # 128 positions after RoBERTa's padding offset
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
    )
    XLMRobertaModel(config).save_pretrained(directory, safe_serialization=True)
    return directory


# Family id -> (transformer builder, pipeline). Each is a shape real models on the Hub have.
FAMILIES: dict[str, tuple[Callable[..., Path], dict[str, Any]]] = {
    # all-MiniLM-L6-v2: BERT, mean pooling, Normalize.
    "bert-mean": (build_tiny_bert, {"pooling": ("mean",)}),
    # all-mpnet-base-v2: MPNet, mean pooling, Normalize.
    "mpnet-mean": (build_tiny_mpnet, {"pooling": ("mean",)}),
    # bge / e5 shaped: BERT, the CLS token's state, no Normalize module.
    "bert-cls-raw": (build_tiny_bert, {"pooling": ("cls",), "normalize": False}),
    # LaBSE shaped: CLS pooling, Dense with tanh, Normalize.
    "bert-cls-dense": (
        build_tiny_bert,
        {"pooling": ("cls",), "dense": ({"out_features": 24},)},
    ),
    # sentence-transformers 6: a residual Dense without bias or activation, after mean+max.
    "bert-dense-residual": (
        build_tiny_bert,
        {
            "pooling": ("mean", "max"),
            "dense": (
                {"out_features": 20, "bias": False, "activation": IDENTITY, "use_residual": True},
                {"out_features": 20, "activation": TANH, "use_residual": True},
            ),
            "normalize": False,
        },
    ),
    # e5 / bge instructions: prompts with a default, prompt tokens pooled.
    "bert-prompts": (
        build_tiny_bert,
        {
            "prompts": {"query": "query: ", "passage": "passage: ", "empty": ""},
            "default_prompt_name": "query",
        },
    ),
    # INSTRUCTOR shaped: prompts left out of the pool (include_prompt false), on MPNet.
    "mpnet-prompts-excluded": (
        build_tiny_mpnet,
        {
            "prompts": {"query": "query: ", "passage": "passage: "},
            "default_prompt_name": "query",
            "include_prompt": False,
        },
    ),
    # msmarco-distilbert / distiluse shaped: DistilBERT, mean pooling, Dense.
    "distilbert-mean-dense": (
        build_tiny_distilbert,
        {"dense": ({"out_features": 16},), "normalize": False},
    ),
    # paraphrase-multilingual / multilingual-e5 shaped: XLM-RoBERTa, mean pooling, Normalize.
    "xlm-roberta-mean": (build_tiny_xlm_roberta, {"pooling": ("mean",)}),
}


def build_family(name: str, directory: Path) -> Path:
    """Write the tiny model of family ``name`` to ``directory``."""
    build, pipeline = FAMILIES[name]
    return write_pipeline(build(directory), **pipeline)
