"""While one thread builds the compiled graphs (``building_graphs``, a worker's warm-up), the
encodes of other threads run eager instead of waiting for the build or starting it beside it;
once the builder is done they take the graphs it built."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from django_sbert.encoder import SentenceEncoder
from django_sbert.encoder.compiled import another_thread_builds, building_graphs

pytestmark = pytest.mark.heavy  # the builder compiles

TEXTS = ["A plane is taking off.", "Three dogs run across a snowy field."]


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def in_thread(function):
    """``function()``'s result, called in another thread."""
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", function()))
    thread.start()
    thread.join(120)
    return result["value"]


def test_only_other_threads_see_a_builder():
    assert not another_thread_builds()
    with building_graphs():
        assert not another_thread_builds()
        assert in_thread(another_thread_builds)
    assert not in_thread(another_thread_builds)


def test_other_threads_run_eager_while_the_builder_has_not_built(tiny_model_dir, tiny_encoder):
    model = SentenceEncoder.load(tiny_model_dir, compile=True)
    torch._dynamo.reset()
    before = graphs()
    with building_graphs():
        # Nothing built yet: another thread's batch and single text compile nothing.
        batch = in_thread(lambda: model.encode(TEXTS))
        single = in_thread(lambda: model.encode(TEXTS[0]))
        assert graphs() == before
        np.testing.assert_allclose(batch, tiny_encoder.encode(TEXTS), atol=1e-5)
        np.testing.assert_allclose(single, tiny_encoder.encode(TEXTS[0]), atol=1e-5)
        model.encode(TEXTS)  # the builder's own pass compiles the batch graph
        assert graphs() == before + 1
        # Built: the other thread's batch now runs through it, compiling nothing more.
        in_thread(lambda: model.encode(TEXTS[::-1]))
        assert graphs() == before + 1
    # The builder is done: the single-text graph is built by whichever call needs it first.
    model.encode(TEXTS[0])
    assert graphs() == before + 2
