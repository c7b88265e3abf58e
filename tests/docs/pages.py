"""Reading the docs pages: their code blocks, inline code, links and headings' anchors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# A code block preceded by this comment is not checked (it needs a running site, or shows a
# placeholder on purpose); write the reason after it: <!-- docs-test: skip (why) -->
SKIP = "<!-- docs-test: skip"


def pages() -> list[Path]:
    """Every page of the docs: docs/*.md and docs/howto/*.md."""
    return sorted([*DOCS.glob("*.md"), *(DOCS / "howto").glob("*.md")])


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    skipped: bool

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        body = "\n".join(line[len(match[1]) :] for line in match[3].splitlines())
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                match[2].lower(),
                body,
                before.strip().startswith(SKIP),
            )
        )
    return found


def prose(page: Path) -> str:
    """The page without its code blocks."""
    return FENCE.sub("", page.read_text())


def inline_code(page: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", prose(page))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Anchors of a page's headings (a repeated heading gets -1, -2 as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(page), re.MULTILINE):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def links(page: Path) -> list[str]:
    """Relative link targets of the page (``file.md``, ``file.md#anchor``, ``#anchor``)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(page))
    return [t for t in targets if "://" not in t and not t.startswith("mailto:")]
