"""Build a tiny, randomly initialised BERT sentence encoder for fast tests.

The directory it writes is a complete sentence-transformers model (modules.json, pooling
config, tokenizer, safetensors weights), so every loading path is exercised; only the quality
of the vectors is meaningless.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

COMMON_WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "and",
    "is",
    "are",
    "was",
    "were",
    "be",
    "on",
    "for",
    "with",
    "as",
    "by",
    "at",
    "from",
    "that",
    "this",
    "it",
    "not",
    "or",
    "bank",
    "banks",
    "rate",
    "rates",
    "interest",
    "money",
    "market",
    "economy",
    "price",
    "prices",
    "tax",
    "government",
    "election",
    "vote",
    "party",
    "minister",
    "president",
    "court",
    "law",
    "war",
    "peace",
    "city",
    "country",
    "people",
    "year",
    "new",
    "old",
    "big",
    "small",
    "cat",
    "cats",
    "dog",
    "dogs",
    "car",
    "cars",
    "man",
    "woman",
    "child",
    "playing",
    "plays",
    "play",
    "guitar",
    "music",
    "food",
    "eats",
    "eating",
    "runs",
    "running",
    "fast",
    "slow",
    "good",
    "bad",
    "high",
    "low",
    "rise",
    "rising",
    "fall",
    "falling",
    "central",
]


def build_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = [f"##{c}" for c in string.ascii_lowercase + string.digits]
    return specials + chars + pieces + sorted(set(COMMON_WORDS))


def build_tiny_model(directory: str | Path, *, max_seq_length: int = 64, seed: int = 0) -> Path:
    """Write a 2-layer, 32-wide BERT with mean pooling and a Normalize module to ``directory``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # Positional: transformers 4 calls it vocab_file, transformers 5 calls it vocab.
    tokenizer = BertTokenizerFast(str(directory / "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(directory)

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(directory, safe_serialization=True)

    def write(name: str, payload: object) -> None:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2), encoding="utf-8")

    write(
        "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {
                "idx": 1,
                "name": "1",
                "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling",
            },
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            },
        ],
    )
    write("sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False})
    write(
        "1_Pooling/config.json",
        {
            "word_embedding_dimension": 32,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    (directory / "2_Normalize").mkdir(exist_ok=True)
    write("config_sentence_transformers.json", {"prompts": {}, "default_prompt_name": None})
    return directory


def moved_tiny_encoder(directory: str | Path, seed: int) -> Any:
    """The tiny model at ``directory`` with every weight moved by noise: a second version of
    the same architecture, whose vectors differ (a "fine-tuned" version for switch tests)."""
    import torch  # only tests that promote a version need it

    from django_sbert.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(directory)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in encoder.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return encoder
