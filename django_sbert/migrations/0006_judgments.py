"""Judgment lists (graded queries over one field's rows) and stored evaluations of them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_sbert", "0005_training_run_evaluations"),
    ]

    operations = [
        migrations.CreateModel(
            name="JudgmentList",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                ("field", models.CharField(help_text="Its EmbeddingField's name.", max_length=100)),
                ("description", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "content_type",
                    models.ForeignKey(
                        help_text="The model whose rows are graded.",
                        on_delete=django.db.models.deletion.CASCADE,
                        to="contenttypes.contenttype",
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="JudgedQuery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("text", models.TextField()),
                (
                    "judgment_list",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="queries",
                        to="django_sbert.judgmentlist",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "judged queries",
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="Evaluation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "version",
                    models.CharField(help_text="The encoder version measured.", max_length=200),
                ),
                (
                    "mode",
                    models.CharField(
                        help_text="vector, keyword, hybrid or passages.", max_length=20
                    ),
                ),
                (
                    "metrics",
                    models.JSONField(
                        help_text="The metrics by name, the query count and the threshold."
                    ),
                ),
                (
                    "trigger",
                    models.CharField(help_text="manual, promotion or schedule.", max_length=20),
                ),
                ("seconds", models.FloatField()),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                (
                    "judgment_list",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evaluations",
                        to="django_sbert.judgmentlist",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="Judgment",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "object_pk",
                    models.CharField(help_text="The graded row's pk, as text.", max_length=255),
                ),
                (
                    "grade",
                    models.PositiveSmallIntegerField(
                        help_text="0 not relevant, 1 somewhat, 2 relevant, 3 perfect."
                    ),
                ),
                (
                    "query",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="judgments",
                        to="django_sbert.judgedquery",
                    ),
                ),
            ],
            options={
                "ordering": ["query", "-grade", "object_pk"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("query", "object_pk"), name="sbert_judgment_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("grade__gte", 0), ("grade__lte", 3)),
                        name="sbert_judgment_grade_0_3",
                    ),
                ],
            },
        ),
        migrations.AddConstraint(
            model_name="judgedquery",
            constraint=models.UniqueConstraint(
                fields=("judgment_list", "text"), name="sbert_judged_query_unique"
            ),
        ),
    ]
