"""The tutorial's app as its pages build it: docs/tutorial.md, then each how-to that says it
builds on the tutorial, in order.

A code block whose first line names a file (``# news/models.py``, ``<!-- news/templates/... -->``,
``{# news/templates/... #}``) is that file's text; ``(add at the end)`` after the name, or a
package's ``__init__.py``, appends it to the file instead. tests/docs/test_tutorial_app.py
writes them and runs ``manage.py check`` after each page; tests/example/test_tutorial.py also
runs every shell line and compares what the pages print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.docs.pages import DOCS, blocks

TUTORIAL = DOCS / "tutorial.md"
# The sentence a how-to opens with when its blocks continue the tutorial's app.
BUILDS_ON = "builds on the [tutorial](../tutorial.md)'s app"
# The order readers meet them: the tutorial's "Where to go next" sends them to the REST API
# after the search page (which its section 7 leads to).
ORDER = ("search-page.md", "rest-api.md")
HEADER = re.compile(r"^(?:#|<!--|\{#) (\S+\.(?:py|html))( \(add at the end\))?")


def howtos() -> list[Path]:
    """The how-tos whose blocks continue the tutorial's app, in reading order."""
    found = [p for p in sorted((DOCS / "howto").glob("*.md")) if BUILDS_ON in p.read_text()]
    return sorted(found, key=lambda p: ORDER.index(p.name) if p.name in ORDER else len(ORDER))


@dataclass(frozen=True)
class ProjectFile:
    """A block that is (or ends) a file of the project."""

    path: str
    text: str
    append: bool


def project_file(code: str) -> ProjectFile | None:
    """The file a block's first line names, or None."""
    first, _, body = code.partition("\n")
    header = HEADER.match(first)
    if header is None:
        return None
    path = header[1]
    append = bool(header[2]) or Path(path).name == "__init__.py"
    return ProjectFile(path, body, append)


def write(folder: Path, item: ProjectFile) -> None:
    target = folder / item.path
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if item.append else "w") as f:
        f.write("\n" + item.text)


def project_files(page: Path) -> list[ProjectFile]:
    """The page's blocks that name a file, in order (blocks marked skip left out)."""
    found = []
    for block in blocks(page):
        item = None if block.skipped else project_file(block.text)
        if item is not None:
            found.append(item)
    return found
