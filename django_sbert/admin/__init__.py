"""The admin: fine-tuning pages for django-sbert's models, and ``EmbeddingAdminMixin`` for yours.

::

    from django_sbert.admin import EmbeddingAdminMixin

    @admin.register(Article)
    class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
        sbert_pair_fields = ("title", "body")

Modules (their ModelAdmins registered when Django's admin autodiscovery imports this package):
``finetuning`` (training pairs and runs), ``versions`` (encoder versions and the promotion
history), ``evaluation`` (judgment lists, "Evaluate now", quality over time), ``grading`` (the
grading page's work), ``searchlog`` (the search log and its events, read-only, with their UBI
export), ``feedback`` (the search log's admin with "What people look for"), ``mixins``
(``EmbeddingAdminMixin`` and the helpers of the admin's own pages), ``display`` (progress bar,
loss curve, metrics table, charts).
"""

from __future__ import annotations

from .evaluation import JudgedQueryAdmin, JudgmentListAdmin
from .feedback import SearchLogAdmin
from .finetuning import TrainingPairAdmin, TrainingRunAdmin
from .mixins import EmbeddingAdminMixin
from .searchlog import SearchEventAdmin
from .versions import EncoderVersionAdmin

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
