"""encoder.matryoshka.truncate: the first d values of a vector, back at unit length."""

from __future__ import annotations

import numpy as np
import pytest

from django_sbert.encoder.matryoshka import truncate


def test_truncate_cuts_and_renormalizes_each_row():
    vectors = np.random.default_rng(0).standard_normal((5, 12)).astype(np.float32)
    cut = truncate(vectors, 4)
    assert cut.shape == (5, 4) and cut.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-6)
    expected = vectors[:, :4] / np.linalg.norm(vectors[:, :4], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expected, rtol=1e-6)


def test_one_vector_and_nested_cuts_agree():
    vector = np.random.default_rng(1).standard_normal(12).astype(np.float32)
    np.testing.assert_allclose(truncate(truncate(vector, 8), 4), truncate(vector, 4), rtol=1e-6)


def test_the_full_width_is_returned_as_it_is_and_zero_stays_zero():
    vector = np.array([3.0, 4.0], dtype=np.float32)
    assert truncate(vector, 2) is not None and truncate(vector, 2).tolist() == [3.0, 4.0]
    assert truncate(np.zeros(4), 2).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("dimensions", [0, 5])
def test_sizes_outside_the_vector_are_refused(dimensions):
    with pytest.raises(ValueError, match="cannot truncate 4-dimensional"):
        truncate(np.ones(4), dimensions)
