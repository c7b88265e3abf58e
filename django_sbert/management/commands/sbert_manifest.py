"""``manage.py sbert_manifest``: write the manifest of versions saved before manifests existed.

::

    manage.py sbert_manifest            # every fine-tuned version whose files lack a manifest
    manage.py sbert_manifest VERSION    # just these versions
    manage.py sbert_manifest --force VERSION        # also over a malformed manifest
    manage.py sbert_manifest --forget-base default  # the settings' model changed on purpose

Versions saved by an older django-sbert have their files in the model storage but no
manifest; this hashes the files as they are now, writes one and records its digest. It never
runs for a version whose row records a manifest digest (a manifest missing now was deleted,
and a new one would vouch for whatever the files are now). ``--forget-base ENCODER`` deletes
the record of the settings' model's files (``serving.identity``): the next host to serve it
records its own. docs/security.md ("Model files: what a host trusts").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.models import EncoderVersion
from django_sbert.serving.identity import forget_base_record
from django_sbert.serving.storage import (
    ManifestError,
    describe_storage,
    load_manifest,
    manifest_digest,
    model_storage,
    sealed_digest,
    write_manifest,
)


class Command(BaseCommand):
    help = "Write manifest.json for fine-tuned versions whose files in the model storage lack one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("versions", nargs="*", help="Versions to seal; default: all.")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Replace a malformed manifest (never one whose digest the database records).",
        )
        parser.add_argument(
            "--forget-base",
            metavar="ENCODER",
            help="Forget the recorded files of ENCODER's settings' model instead.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["forget_base"]:
            deleted = forget_base_record(options["forget_base"])
            self.stdout.write(
                f"{options['forget_base']}: forgot {deleted} recorded base model(s); the next "
                "host to serve it records its files."
            )
            return
        rows = EncoderVersion.objects.filter(is_base=False).exclude(directory="")
        if options["versions"]:
            rows = rows.filter(version__in=options["versions"])
            unknown = set(options["versions"]) - set(rows.values_list("version", flat=True))
            if unknown:
                raise CommandError(f"No fine-tuned version named {', '.join(sorted(unknown))}.")
        storage = model_storage()
        failed = 0
        for row in rows.order_by("id"):
            problem = self.seal(row, storage, force=options["force"])
            if problem is not None:
                self.stdout.write(f"{row.version}: {problem}")
                failed += 1
        if failed:
            raise CommandError(f"{failed} version(s) could not be sealed (see above).")

    def seal(self, row: EncoderVersion, storage: Any, *, force: bool) -> str | None:
        """Seal one version; what stands in the way, or None."""
        if Path(row.directory).is_absolute():
            return (
                f"{row.directory} is a local directory, not a storage key; copy it into the "
                "model storage and set its directory to the key."
            )
        try:
            _, body = load_manifest(row.directory, storage)
        except ManifestError as exc:
            body, malformed = None, storage.exists(f"{row.directory}/manifest.json")
            reason = str(exc)
        else:
            malformed = False
        if row.manifest_sha256:
            if body is not None and manifest_digest(body) == row.manifest_sha256:
                self.stdout.write(f"{row.version}: has its recorded manifest")
                return None
            return (
                "the database recorded its manifest's digest when it was saved, and the "
                "manifest in the storage is missing or another one: refused. Restore the "
                "version's files and manifest from a backup, or train it again."
            )
        if body is not None:
            row.manifest_sha256 = manifest_digest(body)
            row.save(update_fields=["manifest_sha256"])
            self.stdout.write(f"{row.version}: has a manifest; recorded its digest")
            return None
        if malformed and not force:
            return (
                f"{reason}. Refused: pass --force to replace it with one of the files as they are."
            )
        try:
            manifest = write_manifest(
                row.directory, encoder=row.encoder_name, version=row.version, storage=storage
            )
        except ManifestError as exc:
            return str(exc)
        row.manifest_sha256 = sealed_digest(row.directory) or ""
        row.save(update_fields=["manifest_sha256"])
        self.stdout.write(
            f"{row.version}: wrote {row.directory}/manifest.json "
            f"({len(manifest['files'])} files) in {describe_storage(storage)}; recorded its digest"
        )
        return None
