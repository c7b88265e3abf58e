"""Wagtail's own backend test suite against django-sbert's Wagtail backend, in each mode, beside
Wagtail's database backend (docs/wagtail.md, "Wagtail's backend tests that differ, and why").

- ``backends.py``: the suite's classes, one per backend and mode, and what differs by design;
- ``settings.py``: the test settings plus the suite's models (modelsearch's test app) and this app;
- ``run.py``: runs the suite with Django's test runner and counts passed / differs / failed;
- ``apps.py``, ``fixtures/search.json``, ``management/commands/``: the suite's data (the
  catalogue of books, authors and characters its assertions name, which modelsearch's
  packages do not ship) and the command name it calls.

``tests/wagtail/test_suite.py`` runs it in a subprocess on this Wagtail and on Wagtail 7.
"""
