"""A tiny Wagtail site: news pages with a StreamField body (tests/wagtail)."""
