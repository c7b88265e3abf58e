"""The collection statistics of BM25 keyword search (django_sbert/keyword/statistics.py).

Plain tables rather than models: only PostgreSQL's triggers write them and only the search
reads them, in SQL. ``"<table>.<column>"`` names the keyword column counted.
"""

from django.db import migrations

CREATE = """
CREATE TABLE django_sbert_keyword_total (
    relation text NOT NULL,
    weight text NOT NULL,
    total bigint NOT NULL,
    PRIMARY KEY (relation, weight)
);
CREATE TABLE django_sbert_keyword_lexeme (
    relation text NOT NULL,
    lexeme text NOT NULL,
    df bigint NOT NULL,
    PRIMARY KEY (relation, lexeme)
);
"""

DROP = """
DROP TABLE IF EXISTS django_sbert_keyword_lexeme;
DROP TABLE IF EXISTS django_sbert_keyword_total;
"""


class Migration(migrations.Migration):
    dependencies = [("django_sbert", "0008_manifest_digest_base_version")]

    operations = [migrations.RunSQL(CREATE, DROP)]
