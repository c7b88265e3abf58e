"""The search log marks a search answered from the keyword side while the encoder was away."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_sbert", "0011_pair_evidence")]

    operations = [
        migrations.AddField(
            model_name="searchlog",
            name="degraded",
            field=models.CharField(
                blank=True,
                default="",
                help_text='"keyword": answered from the keyword side, the encoder being away.',
                max_length=10,
            ),
        ),
    ]
