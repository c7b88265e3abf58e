# Who made each pair from behaviour (PairEvidence), and the network of a search (SearchLog).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_sbert", "0010_search_log"),
    ]

    operations = [
        migrations.AddField(
            model_name="searchlog",
            name="network",
            field=models.CharField(blank=True, db_index=True, default="", max_length=32),
        ),
        migrations.CreateModel(
            name="PairEvidence",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "object_pk",
                    models.CharField(help_text="The clicked row's pk, as text.", max_length=255),
                ),
                ("client", models.CharField(db_index=True, max_length=64)),
                ("network", models.CharField(blank=True, db_index=True, default="", max_length=32)),
                (
                    "position",
                    models.PositiveIntegerField(help_text="The best position it was clicked at."),
                ),
                ("clicked_at", models.DateTimeField(db_index=True, help_text="Its latest click.")),
                (
                    "pair",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evidence",
                        to="django_sbert.trainingpair",
                    ),
                ),
            ],
            options={
                "ordering": ["pair", "clicked_at"],
            },
        ),
    ]
