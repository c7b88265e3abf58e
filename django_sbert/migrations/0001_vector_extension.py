"""Create the pgvector extension before any migration adds a vector column.

Apps that declare an EmbeddingField may depend on this migration explicitly
(``("django_sbert", "0001_vector_extension")``); the app's ``pre_migrate`` handler also creates
the extension, so a fresh project's ``makemigrations`` + ``migrate`` works without it.
"""

from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [VectorExtension()]
