"""``manage.py sbert_import_judgments LIST app_label.Model.field [FILE]``: fill a judgment list.

::

    manage.py sbert_import_judgments faq news.Article.embedding graded.csv
    manage.py sbert_import_judgments faq news.Article.embedding graded.jsonl
    manage.py sbert_import_judgments scifact news.Article.embedding qrels.tsv --format trec \\
        --queries queries.jsonl --doc-id-field doc_id
    manage.py sbert_import_judgments held-out news.Article.embedding --from-eval-pairs

The list is created when it does not exist (on that model's field); an existing list must be
of the same field. All or nothing unless ``--skip-invalid``: every bad line is listed with its
number, and nothing is saved.
"""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.evaluation import judgments
from django_sbert.exceptions import JudgmentsImportError
from django_sbert.indexing import get_ref
from django_sbert.models import JudgmentList


class Command(BaseCommand):
    help = "Fill a judgment list from CSV, JSON Lines or TREC qrels, or from the eval pairs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("list", help="The judgment list's name (created if new).")
        parser.add_argument("target", help="The graded field: app_label.Model.field.")
        parser.add_argument(
            "file", nargs="?", help="The judgments file (not with --from-eval-pairs)."
        )
        parser.add_argument(
            "--format",
            choices=judgments.FORMATS,
            help="Default: from the name (.jsonl: jsonl; .qrels .trec .tsv .txt: trec; else csv).",
        )
        parser.add_argument(
            "--queries", help="TREC: the queries, 'qid<TAB>text' lines or JSON Lines (_id, text)."
        )
        parser.add_argument(
            "--doc-id-field",
            help="The model's field holding each row's document id (doc_id in the file, TREC).",
        )
        parser.add_argument(
            "--from-eval-pairs",
            action="store_true",
            help="Judge from the eval pairs: each text_a a query, the row holding its text_b.",
        )
        parser.add_argument(
            "--skip-invalid", action="store_true", help="Import the good lines anyway."
        )
        parser.add_argument("--description", default="", help="The list's description, when new.")

    def handle(self, *args: Any, **options: Any) -> None:
        name, target, path = options["list"], options["target"], options["file"]
        if options["from_eval_pairs"] == bool(path):
            raise CommandError("Give a judgments file, or --from-eval-pairs (not both).")
        label, _, field = target.rpartition(".")
        try:
            ref = get_ref(label, field)
        except LookupError as exc:
            raise CommandError(f"{target}: {exc} Name the field as app_label.Model.field.") from exc
        content_type = ContentType.objects.get_for_model(ref.model)
        judgment_list, created = JudgmentList.objects.get_or_create(
            name=name,
            defaults={
                "content_type": content_type,
                "field": ref.name,
                "description": options["description"],
            },
        )
        if (judgment_list.content_type_id, judgment_list.field) != (content_type.pk, ref.name):
            model = judgment_list.content_type.model_class()
            graded = f"{model._meta.label if model else 'a removed model'}.{judgment_list.field}"
            raise CommandError(
                f"Judgment list {name!r} grades {graded}, not {target}: choose another name."
            )
        try:
            if options["from_eval_pairs"]:
                report = judgments.from_eval_pairs(judgment_list)
            else:
                fmt = options["format"] or judgments.detect_format(path)
                report = judgments.import_file(
                    path,
                    judgment_list,
                    fmt,
                    queries=options["queries"],
                    doc_ids=options["doc_id_field"],
                    skip_invalid=options["skip_invalid"],
                )
        except JudgmentsImportError as exc:
            if created:
                judgment_list.delete()
            raise CommandError(f"{path or 'eval pairs'}: {exc} Nothing was imported.") from exc
        for line, problem in report.errors:
            self.stderr.write(f"{path}:{line}: {problem}")
        if report.errors and not report.judgments:
            if created:
                judgment_list.delete()
            line, problem = report.errors[0]
            raise CommandError(
                f"{len(report.errors)} of {report.rows} lines are invalid; nothing was imported "
                f"(the first, line {line}: {problem}). Fix them, or pass --skip-invalid to "
                "import the rest."
            )
        if report.unmatched:
            self.stderr.write(
                f"{len(report.unmatched)} of {report.rows} eval pairs have a text_b that is no "
                f"row's text of {target}; they were left out."
            )
        queries = judgment_list.queries.count()
        self.stdout.write(
            f"Imported {report.judgments} judgments ({report.queries} new queries) into "
            f"{'new ' if created else ''}judgment list {name!r}, which has {queries} queries."
        )
