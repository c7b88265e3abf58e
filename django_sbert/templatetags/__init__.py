"""Template tags for search pages: ``{% load sbert %}``.

Modules: ``sbert`` (``sbert_passage``, ``sbert_similarity`` and ``sbert_similar``; their markup
lives in ``django_sbert/tags/*.html``, which a site overrides like any app template).
"""
