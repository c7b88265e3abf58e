"""django-sbert: semantic search for Django with Sentence-BERT and pgvector."""

__version__ = "0.2.0"
