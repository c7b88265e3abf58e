"""The demo corpus is clean: no wiki-markup remnant the extraction left, and cleaning is done.

``example_project/articles/data/clean.py`` rewrote ``wikinews.jsonl.gz`` once; these tests
check the committed file for the glitches it removed, that running it again changes nothing,
and that its rules leave ordinary prose alone.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from tests.example.conftest import ROOT

DATA = ROOT / "example_project" / "articles" / "data"

# Remnants found in the extracted text, anywhere in an article.
GLITCHES = {
    "wiki table": r"\{\||\|\}|\|\||\|-",
    "link or template brackets": r"\[\[|\]\]|\{\{|\}\}",
    "picture": r"(?<![/\w])(?:File|Image):[^ ]+\.(?:jpe?g|png|gif|svg|ogg)|\|thumb\||thumb::",
    "category link": r"\bCategory:",
    "template name": r"\bTemplate:|short=true|OntarioProvincialElection2007|CDNfed2008",
    "magic word": r"__[A-Z]+__",
    "infobox": r"\b[Ii]nfobox",
    "split adjective": r"\b(?:Africa|Australia|Russia|Korea|India|America) n\b|\bIraq i\b"
    r"|\bIsrael i\b|\bJapan ese\b|\bIran ian\b|\bEurope an\b",
    "space before 's": r"\w 's\b",
    "space before -based": r"[\w.] -based",
    "empty parentheses": r"\(\s*[,;]?\s*\)",
    "doubled comma": r",\s*,",
}
# Captions and markup printed before the first sentence, and after the last.
LEADS = (
    r"(?:Economy and business|Politics and conflicts|Culture and entertainment|Crime and law"
    r"|United States infobox|publish|Publish|right|left)\s"
    r"|(?:Australian news|Canadian news|United Kingdom|New Zealand|USA|India|North Korea)"
    r" (?:The|A|On|In)\s"
)
TRAILERS = r"\s(?:publish|Publish|Archive-unreviewed|Haveyoursay|\*|=+)$"


def load_clean() -> ModuleType:
    """``clean.py`` is a script beside the data, not a module of the app: load it by path."""
    spec = importlib.util.spec_from_file_location("corpus_clean", DATA / "clean.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def clean() -> ModuleType:
    return load_clean()


@pytest.fixture(scope="module")
def records(clean: ModuleType) -> list[dict]:
    return clean.read(clean.CORPUS)


@pytest.fixture(scope="module")
def lexicon(clean: ModuleType, records: list[dict]) -> object:
    """What the corpus teaches the rules, learned once. The clean corpus has lost the
    captions the original taught (it started 36 articles with "New Zealand The ..."), so
    the cases below name the captions they rely on."""
    learned = clean.Lexicon.learn(r["text"] for r in records)
    captions = {"new zealand", "north korea", "united states", "iran", "research"}
    return clean.Lexicon(words=learned.words, captions=captions, body=learned.body)


def test_the_corpus_keeps_its_articles_and_keys(records: list[dict]) -> None:
    assert len(records) == 5550
    assert {tuple(r) for r in records} == {("id", "title", "date", "categories", "url", "text")}
    assert all(len(r["text"]) > 100 for r in records)


@pytest.mark.parametrize("name", list(GLITCHES))
def test_no_article_has_a_known_glitch(records: list[dict], name: str) -> None:
    pattern = re.compile(GLITCHES[name])
    found = [
        (r["id"], m.group(0), r["text"][max(0, m.start() - 40) : m.end() + 40])
        for r in records
        for field in ("title", "text")
        if (m := pattern.search(r[field]))
    ]
    assert not found, f"{len(found)} articles with a {name}, e.g. {found[:3]}"


def test_no_article_starts_or_ends_with_a_caption_or_markup(records: list[dict]) -> None:
    starts = [r["text"][:60] for r in records if re.match(LEADS, r["text"])]
    ends = [r["text"][-60:] for r in records if re.search(TRAILERS, r["text"])]
    assert not starts, starts[:5]
    assert not ends, ends[:5]


@pytest.mark.heavy
def test_cleaning_the_committed_corpus_changes_nothing(
    clean: ModuleType, records: list[dict]
) -> None:
    cleaned, texts, titles = clean.clean_records(records)
    assert cleaned == records
    assert not texts.places and not titles.places
    # The file's bytes are what the script writes (same layout and gzip header).
    assert clean.encode(records) == clean.CORPUS.read_bytes()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Captions before the first sentence go ...
        ("Economy and business On Monday, a bank said so.", "On Monday, a bank said so."),
        ("North Korea The North Korea n military said so.", "The North Korean military said so."),
        ("New Zealand Harry Doynhoven, a minister, said.", "Harry Doynhoven, a minister, said."),
        ("United States infobox United States President Barack Obama said.",
         "United States President Barack Obama said."),
        ("__NOTOC__ Infobox Culture and entertainment American comedian Stephen Colbert won.",
         "American comedian Stephen Colbert won."),
        ("OntarioProvincialElection2007 John Ogilvie is a candidate.",
         "John Ogilvie is a candidate."),
        # ... ordinary sentence starts stay.
        ("Iran is enriching uranium.", "Iran is enriching uranium."),
        ("It is over.", "It is over."),
        ("As an Independent I would vote.", "As an Independent I would vote."),
        ("United States officials said so.", "United States officials said so."),
        ("Research In Motion sold phones.", "Research In Motion sold phones."),
        ("Economy and business mining company Glencore said.", "mining company Glencore said."),
        # Words split from their links are joined, if the corpus has the whole word.
        ("The US -based firm and Dre 's label,, and () more.",
         "The US-based firm and Dre's label, and more."),
        ("Russia n-owned firms in Iraq i cities.", "Russian-owned firms in Iraqi cities."),
        ("Or an artist, From an update, Japan an aggressor.",
         "Or an artist, From an update, Japan an aggressor."),
        # Markup goes, prose around it stays.
        ("Results follow. {| class wikitable | A || 1 |} Polls closed.",
         "Results follow. Polls closed."),
        ("He said. [[File:X.jpg|thumb|left|A caption.]] She said.", "He said. She said."),
        ("He said so. Related Wikinews. * * publish", "He said so."),
    ],
)  # fmt: skip
def test_rules_fix_glitches_and_leave_prose(
    clean: ModuleType, lexicon: object, text: str, expected: str
) -> None:
    assert clean.clean_text(text, clean.rules(lexicon), clean.Tally(), 0) == expected
