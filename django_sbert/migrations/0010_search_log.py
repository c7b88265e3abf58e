# The search log and its events (django_sbert/models.py: SearchLog, SearchEvent).

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_sbert", "0009_keyword_statistics"),
    ]

    operations = [
        migrations.CreateModel(
            name="SearchLog",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("query", models.TextField()),
                ("normalized", models.TextField(db_index=True)),
                (
                    "mode",
                    models.CharField(
                        help_text="vector, keyword, hybrid or passages.", max_length=10
                    ),
                ),
                (
                    "model_label",
                    models.CharField(help_text='"app_label.ModelName".', max_length=200),
                ),
                ("field", models.CharField(blank=True, default="", max_length=100)),
                ("filters_digest", models.CharField(blank=True, default="", max_length=64)),
                ("encoder_name", models.CharField(default="default", max_length=100)),
                ("version", models.CharField(blank=True, default="", max_length=100)),
                ("results", models.JSONField(blank=True, default=list)),
                ("result_count", models.PositiveIntegerField(default=0)),
                ("client", models.CharField(db_index=True, max_length=64)),
                ("latency_ms", models.FloatField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [
                    models.Index(fields=["model_label", "created_at"], name="sbert_log_model")
                ],
            },
        ),
        migrations.CreateModel(
            name="SearchEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("object_pk", models.CharField(max_length=255)),
                (
                    "position",
                    models.PositiveIntegerField(help_text="The result's position, from 1."),
                ),
                (
                    "kind",
                    models.CharField(
                        help_text='"click" or a configured conversion.', max_length=40
                    ),
                ),
                ("dwell_ms", models.PositiveIntegerField(blank=True, null=True)),
                ("client", models.CharField(db_index=True, max_length=64)),
                (
                    "created_at",
                    models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                ),
                (
                    "search",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="django_sbert.searchlog",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("search", "object_pk", "kind"), name="sbert_event_once"
                    )
                ],
            },
        ),
    ]
