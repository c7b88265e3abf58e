"""Every model family docs/encoder.md claims loads and gives sentence-transformers' vectors.

One tiny random model per family (tests/encoder/tiny_families.py), compared with
sentence-transformers 6 to 1e-5, in the legacy directory layout most Hub models carry and in
the layout sentence-transformers 6 itself writes; texts run past ``max_seq_length``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from django_sbert.encoder import SentenceEncoder, describe
from django_sbert.encoder.transformer import attention_implementation, model_class
from tests.encoder.tiny_families import FAMILIES, MAX_SEQ_LENGTH, build_family

TEXTS = [
    "the cat eats food",
    "A Dog is Running fast!",
    "",
    "x",
    "bank rates rise and the market falls " * 12,  # ~85 tokens: cut at MAX_SEQ_LENGTH
    "the central bank of the country is raising interest rates for the new year " * 3,
    "Ünïcödé, accents and emoji 🎉 survive tokenization.",
]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory):
    """family id -> its directory, built once per module on first use."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_family(name, tmp_path_factory.mktemp(name))
        return built[name]

    return get


def st_model(path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


def resaved_by_sentence_transformers(path: Path, target: Path) -> Path:
    """The same model written by the installed sentence-transformers' own ``save``."""
    st_model(path).save(str(target))
    return target


def assert_same_vectors(ours: SentenceEncoder, path: Path, **kwargs) -> None:
    """Our vectors equal sentence-transformers' for TEXTS, with and without the given prompt."""
    peer = st_model(path)
    assert ours.max_seq_length == peer.max_seq_length == MAX_SEQ_LENGTH
    assert ours.dimensions == peer.get_embedding_dimension()
    mine = ours.encode(TEXTS, batch_size=3, normalize=False, **kwargs)
    theirs = peer.encode(TEXTS, batch_size=3, **kwargs)
    assert mine.shape == theirs.shape == (len(TEXTS), ours.dimensions)
    np.testing.assert_allclose(mine, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["bert-mean", "mpnet-mean", "xlm-roberta-mean"])
def test_texts_run_past_max_seq_length(family_dirs, family):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(family_dirs(family))
    lengths = [len(ids) for ids in tokenizer(TEXTS)["input_ids"]]
    assert sum(length > MAX_SEQ_LENGTH for length in lengths) >= 2
    assert max(lengths) > 3 * MAX_SEQ_LENGTH


@pytest.mark.parametrize("layout", ["legacy", "sentence-transformers-6"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_matches_sentence_transformers(family_dirs, tmp_path, family, layout):
    path = family_dirs(family)
    if layout != "legacy":
        path = resaved_by_sentence_transformers(path, tmp_path / "resaved")
    encoder = SentenceEncoder.load(path)
    assert encoder.dimensions == describe(path).dimensions
    assert_same_vectors(encoder, path)  # the default prompt, where the model declares one
    for name in encoder.prompts:
        assert_same_vectors(encoder, path, prompt_name=name)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_saved_family_loads_in_sentence_transformers(family_dirs, tmp_path, family):
    encoder = SentenceEncoder.load(family_dirs(family))
    encoder.save(tmp_path / "saved")
    assert_same_vectors(encoder, tmp_path / "saved")
    reloaded = SentenceEncoder.load(tmp_path / "saved")
    np.testing.assert_array_equal(reloaded.encode(TEXTS), encoder.encode(TEXTS))


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("bert-mean", "sdpa"),
        ("distilbert-mean-dense", "sdpa"),
        ("xlm-roberta-mean", "sdpa"),
        ("mpnet-mean", "eager"),
    ],
)
def test_sdpa_only_where_the_class_implements_it(family_dirs, family, expected):
    from transformers import AutoConfig

    path = family_dirs(family)
    cls = model_class(AutoConfig.from_pretrained(path))
    assert attention_implementation(cls) == expected
    assert bool(cls._supports_sdpa) == (expected == "sdpa")
    encoder = SentenceEncoder.load(path)
    assert type(encoder.transformer) is cls
    assert encoder.transformer.config._attn_implementation == expected


@pytest.mark.parametrize("family", ["mpnet-mean", "mpnet-prompts-excluded", "bert-mean"])
def test_loading_is_silent(family_dirs, capfd, family):
    path = family_dirs(family)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SentenceEncoder.load(path).encode(TEXTS)
    out, err = capfd.readouterr()
    assert [str(w.message) for w in caught] == []
    assert (out, err) == ("", "")


def test_default_prompt_applies_and_can_be_overridden(family_dirs):
    encoder = SentenceEncoder.load(family_dirs("bert-prompts"))
    assert encoder.default_prompt_name == "query"
    default = encoder.encode(TEXTS)
    np.testing.assert_allclose(default, encoder.encode(TEXTS, prompt="query: "), atol=1e-6)
    plain = encoder.encode(TEXTS, prompt_name="empty")
    assert not np.allclose(default, plain, atol=1e-3)
    np.testing.assert_allclose(plain, encoder.encode(TEXTS, prompt=""), atol=1e-6)


def test_int8_and_bfloat16_run_on_mpnet(family_dirs):
    path = family_dirs("mpnet-mean")
    reference = SentenceEncoder.load(path).encode(TEXTS)
    for options in ({"quantize": "int8"}, {"dtype": "bfloat16"}):
        vectors = SentenceEncoder.load(path, **options).encode(TEXTS)
        cosines = (vectors * reference).sum(axis=1)
        assert cosines.min() > 0.95, options
