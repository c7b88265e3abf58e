"""docs/commands.md's option tables, rendered from each management command's own parser.

Every command of ``django_sbert/management/commands/`` is listed with its arguments as argparse
knows them (flags, choices, defaults, help), so the page cannot drift from the code::

    python -m django_sbert.management.reference                           # print the tables
    python -m django_sbert.management.reference --write docs/commands.md  # update the page

Django's own options (``--verbosity``, ``--settings``...) are left out: every command has them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import django
from django.conf import settings
from django.core.management import load_command_class

from ..conf.reference import replace_tables

COMMANDS_DIR = Path(__file__).parent / "commands"
BEGIN, END = "<!-- commands:{} -->", "<!-- /commands:{} -->"
# The options BaseCommand adds to every parser (django/core/management/base.py).
DJANGO_OPTIONS = {
    "-h",
    "--version",
    "-v",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def command_names() -> list[str]:
    """The management commands django-sbert ships, by file name."""
    return sorted(p.stem for p in COMMANDS_DIR.glob("[!_]*.py"))


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser ``manage.py name`` uses (needs Django set up: commands import models)."""
    return load_command_class("django_sbert", name).create_parser("manage.py", name)


def own_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The command's own arguments: positionals first, Django's shared options left out."""
    return [
        a
        for a in parser._actions  # noqa: SLF001 - argparse keeps no public list of them
        if not set(a.option_strings) & DJANGO_OPTIONS
    ]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name}` ..." if action.nargs in ("*", "+") else f"`{name}`"
    flags = " / ".join(f"`{flag}`" for flag in action.option_strings)
    if action.nargs == 0:
        return flags
    metavar = action.metavar or (action.dest.upper() if not action.choices else None)
    value = metavar if metavar else "{" + ",".join(map(str, action.choices or ())) + "}"
    return f"{flags} `{value}`" + (" ..." if action.nargs in ("*", "+") else "")


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], (), ""):
        return ""
    return f"`{action.default}`"


def options_table(name: str) -> str:
    """Markdown of one command: its help line, then a row per argument."""
    parser = command_parser(name)
    lines = [_cell(parser.description or ""), "", "| argument | default | what it does |"]
    lines.append("|---|---|---|")
    for action in own_actions(parser):
        choices = ""
        if action.choices and (action.metavar or not action.option_strings):
            choices = f" One of {', '.join(f'`{c}`' for c in action.choices)}."
        help_text = "" if action.help in (None, argparse.SUPPRESS) else action.help
        help_text = help_text.replace("%(default)s", str(action.default)).replace("%%", "%")
        lines.append(f"| {_argument(action)} | {_default(action)} | {_cell(help_text + choices)} |")
    return "\n".join(lines)


def reference_tables() -> dict[str, str]:
    """Markdown per command, keyed by the command's name."""
    return {name: options_table(name) for name in command_names()}


def write_reference(text: str) -> str:
    """``text`` (docs/commands.md) with every marked table replaced by the rendered one."""
    return replace_tables(text, reference_tables(), (BEGIN, END), "docs/commands.md")


def _setup_django() -> None:
    """Enough of Django to build the parsers when no settings module is given."""
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        settings.configure(
            INSTALLED_APPS=[
                "django.contrib.contenttypes",
                "django.contrib.auth",
                "django_sbert",
            ],
            DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "docs"}},
            SBERT={"AUTO_EMBED": False},
        )
    django.setup()


if __name__ == "__main__":  # python -m django_sbert.management.reference [--write FILE]
    _setup_django()
    if sys.argv[1:2] == ["--write"]:
        page = Path(sys.argv[2])
        page.write_text(write_reference(page.read_text()))
    else:
        for name, table in reference_tables().items():
            print(f"{BEGIN.format(name)}\n{table}\n{END.format(name)}\n")
