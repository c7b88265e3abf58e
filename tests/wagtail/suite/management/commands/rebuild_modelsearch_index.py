"""modelsearch's name for ``update_index``: Wagtail's backend suite calls the command by that
name, which only the ``modelsearch`` app provides, not ``wagtail.search``."""

from wagtail.search.management.commands.update_index import Command

__all__ = ["Command"]
