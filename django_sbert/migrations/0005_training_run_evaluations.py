from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_sbert", "0004_staged_passages"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingrun",
            name="evaluations",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
