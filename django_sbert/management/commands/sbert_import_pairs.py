"""``manage.py sbert_import_pairs FILE``: load training pairs from CSV or JSON Lines.

::

    manage.py sbert_import_pairs pairs.csv --split train --source faq
    manage.py sbert_import_pairs eval.jsonl --split eval

All or nothing unless ``--skip-invalid``: every bad row is listed with its line number. A
file over ``finetuning.pairs.MAX_FILE_BYTES`` is refused before it is read, and one
that is not UTF-8 before anything is saved.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.finetuning import pairs


class Command(BaseCommand):
    help = "Import training pairs (text_a, text_b, text_negative, score, label, split)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="A .csv (with a header row) or .jsonl file.")
        parser.add_argument("--format", choices=["csv", "jsonl"], help="Default: from the name.")
        parser.add_argument(
            "--split",
            choices=["train", "eval"],
            default="train",
            help="The split of rows whose file gives none.",
        )
        parser.add_argument(
            "--source",
            default="",
            help="Default: the path as given; when that is too long, the file's name (cut to "
            "fit, keeping the extension).",
        )
        parser.add_argument(
            "--skip-invalid", action="store_true", help="Import the good rows anyway."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["file"]
        fmt = options["format"] or pairs.detect_format(name)
        try:
            source = pairs.clean_source(options["source"] or pairs.source_for_file(name))
            pairs.check_file_size(os.stat(name).st_size)
            with open(name, "rb") as stream:  # import_pairs decodes, naming lines not UTF-8
                report = pairs.import_pairs(
                    stream,
                    fmt,
                    split=options["split"],
                    source=source,
                    skip_invalid=options["skip_invalid"],
                )
        except OSError as exc:
            raise CommandError(f"Cannot read {name}: {exc}") from exc
        except pairs.PairsImportError as exc:
            raise CommandError(f"{name}: {exc} Nothing was imported.") from exc
        for line, problem in report.errors:
            self.stderr.write(f"{name}:{line}: {problem}")
        if report.errors and not report.created:
            line, problem = report.errors[0]
            raise CommandError(
                f"{len(report.errors)} of {report.rows} rows are invalid; nothing was imported "
                f"(the first, line {line}: {problem}). Fix them, or pass --skip-invalid to "
                "import the rest."
            )
        self.stdout.write(f"Imported {report.created} pairs from {name}.")
