# Keeps each article's vector in its row instead of PostgreSQL's TOAST table (docs/deployment.md,
# "Vector storage"): an article's title, body and tsvector push its row past 2 kB, and pgvector's
# default storage would then fetch the vector from TOAST on every scan that reads it.

from django.db import migrations

from django_sbert.operations import SetVectorStorage


class Migration(migrations.Migration):
    dependencies = [
        ("articles", "0003_article_keyword_search"),
    ]

    operations = [SetVectorStorage("article", "embedding", "main")]
