"""The demo's judgment list, "Held-out pairs": search quality measured from the first start.

``prepare_demo`` makes it once from the demo's held-out training pairs (``articles.pairs``):
each eval pair's headline is a query, the article its lead paragraph came from is graded 3
(``django_sbert.evaluation.judgments.from_eval_pairs``). Once every article has its vectors,
``demo.py`` runs ``manage.py evaluate_demo``, which measures the list once with the serving
version in every mode, so the admin's judgment list page shows numbers (and its chart a first
point) before anyone grades a query. A second start finds both done and does nothing.

Kept apart from the models module so that its functions can run on any model's field.
"""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db import transaction

from django_sbert.evaluation.judgments import JudgmentsReport, from_eval_pairs
from django_sbert.evaluation.run import evaluate
from django_sbert.indexing import get_ref
from django_sbert.models import Evaluation, JudgmentList, TrainingPair

NAME = "Held-out pairs"
DESCRIPTION = (
    "The demo's held-out eval pairs: each headline a query, the article its lead paragraph "
    "came from graded 3. Made by prepare_demo (articles/judgments.py)."
)


def make_held_out_list(
    model_label: str, field: str, source: str, name: str = NAME
) -> JudgmentsReport | None:
    """Make the judgment list ``name`` over ``model_label.field`` from the eval pairs of
    ``source``, unless it exists or there are no such pairs (None then)."""
    if JudgmentList.objects.filter(name=name).exists():
        return None
    pairs = TrainingPair.objects.filter(source=source, split="eval").order_by("pk")
    if not pairs.exists():
        return None
    ref = get_ref(model_label, field)
    with transaction.atomic():
        judgment_list = JudgmentList.objects.create(
            name=name,
            content_type=ContentType.objects.get_for_model(ref.model),
            field=field,
            description=DESCRIPTION,
        )
        return from_eval_pairs(judgment_list, pairs)


def evaluate_once(name: str = NAME) -> list[Evaluation]:
    """Measure the list ``name`` with the serving version in every mode, unless it has been
    measured already (or does not exist): an empty list then."""
    judgment_list = JudgmentList.objects.filter(name=name).first()
    if judgment_list is None or judgment_list.evaluations.exists():
        return []
    return evaluate(judgment_list, trigger="manual")
