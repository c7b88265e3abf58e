from django.apps import AppConfig


class SuiteConfig(AppConfig):
    """The ``search`` fixture and the command name Wagtail's backend suite needs."""

    name = "tests.wagtail.suite"
    label = "sbert_wagtail_suite"
