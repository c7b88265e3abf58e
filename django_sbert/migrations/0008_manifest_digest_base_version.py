"""EncoderVersion.manifest_sha256 (the manifest's own digest) and BaseVersion (the settings'
model as it first served)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_sbert", "0007_promotion_history")]

    operations = [
        migrations.AddField(
            model_name="encoderversion",
            name="manifest_sha256",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.CreateModel(
            name="BaseVersion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("encoder_name", models.CharField(max_length=100)),
                (
                    "label",
                    models.CharField(
                        help_text="The model's name, e.g. all-MiniLM-L6-v2.", max_length=60
                    ),
                ),
                ("fingerprint", models.CharField(max_length=64)),
                ("files", models.CharField(max_length=64)),
                ("recorded_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("encoder_name", "label"), name="sbert_base_version"
                    )
                ],
            },
        ),
    ]
