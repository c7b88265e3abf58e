"""The admin: fine-tuning pages for django-sbert's models, and ``EmbeddingAdminMixin`` for yours.

::

    from django_sbert.admin import EmbeddingAdminMixin

    @admin.register(Article)
    class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
        sbert_pair_fields = ("title", "body")

Modules (their ModelAdmins registered when Django's admin autodiscovery imports this package):
``finetuning`` (training pairs and training runs), ``versions`` (encoder versions: promote,
roll back, before and after; the promotion history), ``evaluation`` (judgment lists: the
grading page, importing judgments, "Evaluate now", quality over time), ``grading`` (the
grading page's work: the rows of two versions side by side, grades saved into a list),
``searchlog`` (the search log and its events, read-only, with their UBI export),
``feedback`` (the search log's admin with "What people look for"), ``mixins``
(``EmbeddingAdminMixin``, the 403-on-forbidden-action helpers, the URLs and context of the
admin's own pages), ``display`` (progress bar, loss curve, metrics table, the
quality-over-time chart).
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
