"""The demo's training pairs: headline -> lead paragraph, from the articles themselves.

``prepare_demo`` makes them once, so that a visitor can fine-tune from the admin without a
shell or a file: select the pairs, "Fine-tune encoder on selected pairs", then compare and
promote. They are made by ``content_pairs``, the function behind the admin's "Make training
pairs from selected" (``ArticleAdmin.sbert_pair_fields``), from a seeded sample of articles;
a seeded share of them is held out as the ``eval`` split, which the run stops early on and the
promotion gate compares versions on.
"""

from __future__ import annotations

import random

from django_sbert.finetuning.pairs import content_pairs
from django_sbert.models import TrainingPair

from .models import Article

ARTICLES = 1000  # articles sampled for pairs: a run on the real model takes minutes, not hours
EVAL_SHARE = 0.2  # of them held out: the eval split
SEED = 0
SOURCE = "articles.Article:title->lead"  # content_pairs' own name for them (the admin's too)


def make_demo_pairs(articles: int = ARTICLES) -> tuple[int, int]:
    """Make headline -> lead pairs from a seeded sample of ``articles`` articles, unless pairs
    from them exist already; returns (train, eval) pairs made."""
    if TrainingPair.objects.filter(source=SOURCE).exists():
        return 0, 0
    pks = sorted(Article.objects.values_list("pk", flat=True))
    chosen = sorted(random.Random(SEED).sample(pks, min(articles, len(pks))))
    content_pairs(
        Article,
        "title",
        "lead",
        eval_share=EVAL_SHARE,
        seed=SEED,
        source=SOURCE,
        queryset=Article.objects.filter(pk__in=chosen).order_by("pk"),
    )
    made = TrainingPair.objects.filter(source=SOURCE)
    return made.filter(split="train").count(), made.filter(split="eval").count()
