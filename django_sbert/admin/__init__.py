"""The admin: fine-tuning pages for django-sbert's models, and ``EmbeddingAdminMixin`` for yours.

::

    from django_sbert.admin import EmbeddingAdminMixin

    @admin.register(Article)
    class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
        sbert_pair_fields = ("title", "body")

Modules: ``finetuning`` (the ModelAdmins of training pairs, runs and encoder versions,
registered when Django's admin autodiscovery imports this package), ``evaluation`` (judgment
lists: grading a query's top rows, importing judgments, "Evaluate now", quality over time),
``searchlog`` (the search log and its events, read-only, with their UBI export),
``feedback`` (the search log's admin with "What people look for"), ``mixins``
(``EmbeddingAdminMixin`` and the 403-on-forbidden-action helpers), ``display`` (progress bar,
loss curve, metrics table, the quality-over-time chart).
"""

from __future__ import annotations

from .evaluation import JudgedQueryAdmin, JudgmentListAdmin
from .feedback import SearchLogAdmin
from .finetuning import EncoderVersionAdmin, TrainingPairAdmin, TrainingRunAdmin
from .mixins import EmbeddingAdminMixin
from .searchlog import SearchEventAdmin

__all__ = [
    "EmbeddingAdminMixin",
    "EncoderVersionAdmin",
    "JudgedQueryAdmin",
    "JudgmentListAdmin",
    "SearchEventAdmin",
    "SearchLogAdmin",
    "TrainingPairAdmin",
    "TrainingRunAdmin",
]
