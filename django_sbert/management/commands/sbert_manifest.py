"""``manage.py sbert_manifest``: write the manifest of versions saved before manifests existed.

::

    manage.py sbert_manifest            # every fine-tuned version whose files lack a manifest
    manage.py sbert_manifest VERSION    # just these versions

Hosts serve a version only from files that match its ``manifest.json`` (sizes and sha256
sums). Versions saved by an older django-sbert have their files in the model storage but no
manifest; this hashes the files as they are now and writes one. Run it once, where the model
storage (``SBERT["MODEL_STORAGE"]``, by default ``SBERT["MODEL_DIR"]``) holds those files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.models import EncoderVersion
from django_sbert.serving.storage import (
    ManifestError,
    describe_storage,
    model_storage,
    read_manifest,
    write_manifest,
)


class Command(BaseCommand):
    help = "Write manifest.json for fine-tuned versions whose files in the model storage lack one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("versions", nargs="*", help="Versions to seal; default: all.")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = EncoderVersion.objects.filter(is_base=False).exclude(directory="")
        if options["versions"]:
            rows = rows.filter(version__in=options["versions"])
            unknown = set(options["versions"]) - set(rows.values_list("version", flat=True))
            if unknown:
                raise CommandError(f"No fine-tuned version named {', '.join(sorted(unknown))}.")
        storage = model_storage()
        failed = 0
        for row in rows.order_by("id"):
            if Path(row.directory).is_absolute():
                self.stdout.write(
                    f"{row.version}: {row.directory} is a local directory, not a storage key; "
                    "copy it into the model storage and set its directory to the key."
                )
                failed += 1
                continue
            try:
                read_manifest(row.directory, storage)
                self.stdout.write(f"{row.version}: has a manifest")
                continue
            except ManifestError:
                pass
            try:
                manifest = write_manifest(
                    row.directory, encoder=row.encoder_name, version=row.version, storage=storage
                )
            except ManifestError as exc:
                self.stdout.write(f"{row.version}: {exc}")
                failed += 1
                continue
            self.stdout.write(
                f"{row.version}: wrote {row.directory}/manifest.json "
                f"({len(manifest['files'])} files) in {describe_storage(storage)}"
            )
        if failed:
            raise CommandError(f"{failed} version(s) could not be sealed (see above).")
