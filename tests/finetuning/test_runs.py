"""Training runs' vocabulary stays tied to the encoder core."""

from __future__ import annotations

from django_sbert.encoder.losses import LOSSES
from django_sbert.finetuning.options import LOSS_CHOICES


def test_loss_choices_are_the_encoder_losses():
    """The admin form and the API list LOSS_CHOICES without importing torch; they must name
    exactly the losses the encoder can build."""
    assert sorted(LOSS_CHOICES) == sorted(LOSSES)
    assert len(LOSS_CHOICES) == len(set(LOSS_CHOICES))
