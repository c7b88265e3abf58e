"""Remove the wiki-markup remnants from the demo corpus, in place, reproducibly.

::

    python example_project/articles/data/clean.py            # rewrite wikinews.jsonl.gz
    python example_project/articles/data/clean.py --check    # exit 1 if it would change

The articles were extracted from Wikinews pages by a tool that dropped link targets, templates
and markup imperfectly. Each rule below fixes one kind of remnant, prints how many articles
and places it changed, and is chosen so that it cannot touch ordinary prose (the reasons are
in the comments and in ``README.md``). Text that the extraction lost (a link's words, a
company's name) cannot be recovered and is not invented. The output keeps the file's format
(one JSON object per line, the same keys, gzip) and is deterministic; cleaning a cleaned file
changes nothing. Standard library only, so it runs without the project installed.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "wikinews.jsonl.gz"
MAX_PASSES = 10
LEAD_RULE = "caption or template before the first sentence"

# -- markup blocks ---------------------------------------------------------------------------

# A wiki table, "{| attributes ... |}", flattened into one line: layout, result grids, quote
# frames. Its cells are not prose ("| Alabama||9||McCain |-"), so the whole block goes. A box
# that the extraction cut before its "|}" loses only its opening and attributes (up to its
# first cell, or up to "short=true", where the contributor boxes end), not the article.
TABLE = re.compile(r"\{\|.*?(?:\|\}|short=true)")
TABLE_OPENING = re.compile(r"\{\|[^|]*\|")
# A table row's separator and first cell, left in prose: ' |- | colspan="2" | '.
TABLE_ROW = re.compile(r'\s*\|[-+]\s*(?:\|\s*)?(?:colspan\.?\s*=?\s*"\d+"\s*\|\s*)?')
# What is left of a table whose "{|" was lost: three or more short cells in a row
# ("} | countries {countries } | FTSE 100. 4.902,45 | FTSE 100-tl profit | ...").
TABLE_CELLS = re.compile(r"(?:\}\s*)?(?:\|\|?[^|]{0,60}(?=\|)){3,}\|\}?")
# [[File:x.jpg|thumb|left|200px|Caption]] and [[Image:...]]: a picture and its caption. If
# the extraction cut the closing brackets, the caption is all there is to tell where it ends,
# so the file name and the options go and the caption stays (some articles are only that).
BRACKETED_IMAGE = re.compile(r"\[\[(?:File|Image):[^\]\[]{0,500}\]\]")
OPEN_IMAGE = re.compile(
    r"\[\[(?:File|Image):[^|\]]{1,200}?\.\w{3,4}(?:\|(?:thumb|left|right|center|\d+px))*\|?"
)
# A gallery line, "Image:Name.jpg|Caption": the file name and the caption up to the next
# gallery item, or up to the end of the article (galleries close the articles they are in);
# a file name alone ("Gallery. Image:George Bush - March 27, 2008 (2).jpg Image:...") too.
GALLERY_ITEM = re.compile(
    r"(?<![/\w])(?:File|Image):[^|:]{1,200}?\.(?:jpe?g|png|gif|svg|ogg|tiff?)\b"
    r"(?:\|.*?(?=(?:File|Image):|\Z))?",
    re.IGNORECASE,
)
# "thumb::" starts an image caption used as a speaker label in interviews ("thumb::Isabel:").
THUMB_LABEL = re.compile(r"\bthumb::")
# A link that kept its brackets: "[[mathematics|math]" -> "math", "[[w:Jyllands-Posten|." -> ".".
LINK = re.compile(r"\{?\[\[?(?:[^\]|\[]*\|)([^\]|\[]*)\]{0,2}")
# Magic words: __NOTOC__, __NOEDITSECTION__, ...
MAGIC_WORD = re.compile(r"\s*__[A-Z]+__")
# Leftover link, template and table brackets: "crashed.]]The movie", "}} Wednesday".
STRAY_BRACKETS = re.compile(r"\s*(?:\]\]|\[\[|\}\}|\{\{|\|\})\s*")
# Infobox names in the middle of an article, after a sentence: "... supporters. United States
# infobox The accusation ...", "G8_Summit_July_2005_Infobox", ":Time Warner Inc/Infobox".
INFOBOX = re.compile(
    r"(?<=[.!?\"] )(?:[\w/.'-]+ ){0,4}?[Ii]nfobox(?:End)?\b\s*"
    r"|\S*[_/][Ii]nfobox\b(?: InfoboxEnd)?\s*"
)
# -- the lead: template captions before the first sentence -----------------------------------

# Markup tokens that are never the start of a sentence: the "publish" template, its archive
# marker, image placement words, template ids written as one CamelCase word or with
# underscores or digits inside a word ("OntarioProvincialElection2007", "APEC2005",
# "CDNfed2008interview-ON", "G8_Summit_July_2005_Infobox"), "Template:X", "short=true".
LEAD_TOKEN = re.compile(
    r"""(?:
        [Pp]ublish | Archive-unreviewed | right | left | thumb | center | \* | \] | \}\}
      | infotitle=.{0,200}?InfoboxEnd                   # a box with a title: all of it
      | Template:\S+(?:\ [A-Z]?[a-z]*[/_]\S*)* | [A-Za-z]\S*=\S*
      | InfoboxEnd | InfosectionEnd | [Ww]ikimediaMention | Haveyoursay
      | [A-Za-z0-9]+_[A-Za-z0-9_]+                      # Words_joined_by_underscores
      | [A-Z]?[a-z]+[A-Z][A-Za-z]*\d[\w-]*              # CamelCase2007, CDNfed2008interview-ON
      | [A-Za-z][A-Za-z]*[a-z]\d{4}[\w-]*                # APEC2005, germanelection2005
      | \d{4}[A-Z]{2,}                                   # 2007BWC
    )(?=\s|\Z)""",
    re.VERBOSE,
)
# "United States infobox", "Infobox Culture and entertainment", "30A protest infobox": any
# short run of words that ends with, or is, the word infobox.
LEAD_INFOBOX = re.compile(r"(?:[\w/.'-]+ ){0,5}?[Ii]nfobox(?=\s|\Z)|[Ii]nfobox(?=\s|\Z)")
# Wikinews' topic boxes, printed as their titles (its categories and portals).
# Wikinews' main categories, "X and y": never the start of a sentence, whatever follows.
CATEGORIES = (
    "Economy and business|Politics and conflicts|Culture and entertainment|Crime and law|"
    "Disasters and accidents|Science and technology"
)
CATEGORY_TOPIC = re.compile(CATEGORIES, re.IGNORECASE)
TOPICS = (
    f"{CATEGORIES}|Health|Internet|Aviation|Environment|Obituaries|Sports|Education|Transport|"
    "Labor|Computing|Film|LGBT|Religion|Human rights|Wikinews Today|Australian news|"
    "Canadian news|Welsh news|Sri Lanka news"
)
# Sentence openers that cannot continue a noun phrase: a caption followed by one of these was
# not part of the sentence ("Economy and business The ..."; "New Zealand On Monday ...").
OPENERS = frozenset(
    [
        "The",
        "A",
        "An",
        "On",
        "In",
        "At",
        "According",
        "After",
        "During",
        "Following",
        "Yesterday",
        "Last",
        "It",
        "This",
        "These",
        "For",
        "With",
        "As",
        "Since",
        "When",
        "While",
        "Despite",
        "Several",
        "Two",
        "Three",
        "Four",
        "Five",
        "Six",
        "Seven",
        "Eight",
        "Nine",
        "Ten",
        "Thousands",
        "Hundreds",
        "Dozens",
        "Reports",
        "Some",
        "Many",
        "Most",
    ]
)
# A template's name after a sentence: "... report. Template:Crude Oil Prices The U.S. average
# ..." (its capitalised words, up to a sentence opener; at the start, the lead rule's own).
TEMPLATE = re.compile(
    rf"(?<=[.!?\"] )Template:\S+(?: (?!(?:{'|'.join(sorted(OPENERS))})\b)[A-Z]\S*)*\s*"
)
# A template id after a sentence, where interview templates printed theirs:
# "... radio. CDNfed2008 Because the election ...".
TEMPLATE_ID = re.compile(r"(?<=[.!?\"] )[A-Za-z]+[a-z]\d{4}[\w-]*(?= )")
# Words that start sentences on their own ("Today Lane Hudson submitted ...").
NOT_CAPTIONS = frozenset(
    ["Today", "Tomorrow", "Now", "Meanwhile", "However", "Also", "Currently", "Earlier"]
)
# A caption: one to five words, each a capitalised word, a year or year range, a topic word
# or "and"/"of"/"the"; it ends at a word, never at punctuation that a sentence would have.
CAPTION_WORD = (
    r"(?:[A-Z][\w'’./-]*|\d{4}(?:-\d{2})?|and|of|the|news|war|conflict|crisis|program|"
    r"election|insurgency|inquiry|debate|scandal|legislation|nuclear|financial|relations|"
    r"industrial|protest|merger|disaster|refugee|change|rights|(?<=and )[a-z]+)"
)
CAPTION = re.compile(rf"{CAPTION_WORD}(?: {CAPTION_WORD}){{0,4}}(?=\s)")


# -- rules -----------------------------------------------------------------------------------


@dataclass
class Rule:
    """One kind of glitch and how to fix it in a text (returns the text and how many places)."""

    name: str
    apply: Callable[[str], tuple[str, int]]


@dataclass
class Tally:
    """What each rule changed over the corpus: in which articles, in how many places."""

    articles: dict[str, set[int]] = field(default_factory=dict)
    places: Counter[str] = field(default_factory=Counter)

    def add(self, rule: str, article: int, places: int) -> None:
        self.articles.setdefault(rule, set()).add(article)
        self.places[rule] += places


def _sub(pattern: re.Pattern[str], repl: str | Callable[[re.Match[str]], str] = "") -> Callable:
    def apply(text: str) -> tuple[str, int]:
        return pattern.subn(repl, text)

    return apply


@dataclass
class Lexicon:
    """What the corpus itself tells about its glitches, learned once before cleaning.

    ``words``: every word of the corpus (a split suffix is joined only into a word the corpus
    also has whole). ``captions``: leading phrases (lowercased) seen at least once right
    before a sentence opener, so known to be captions. ``body``: the articles without their
    markup lead and first character, one a line, to ask whether a phrase occurs anywhere but
    at an article's start.
    """

    words: Counter[str]
    captions: set[str]
    body: str

    @classmethod
    def learn(cls, texts: Iterable[str]) -> Lexicon:
        texts = list(texts)
        words = Counter(w for text in texts for w in re.findall(r"[A-Za-z]+", text))
        captions: set[str] = set()
        for text in texts:
            text = _strip_markup_lead(text)
            match = CAPTION.match(text)
            if not match:
                continue
            head = match.group(0).split()
            following = text[match.end() :].split(maxsplit=1)
            # The longest caption prefix that a sentence opener follows.
            for n in range(len(head), 0, -1):
                after = head[n] if n < len(head) else (following[0] if following else "")
                if after in OPENERS and head[0] not in OPENERS | NOT_CAPTIONS:
                    captions.add(" ".join(head[:n]).lower())
                    break
        body = "\n".join(_strip_markup_lead(t)[1:] for t in texts)
        return cls(words=words, captions=captions, body=body)

    def continues(self, phrase: str) -> bool:
        """Whether ``phrase`` occurs in some article other than at its very start."""
        return f" {phrase}" in self.body


def _strip_markup_lead(text: str) -> str:
    while True:
        match = LEAD_TOKEN.match(text) or LEAD_INFOBOX.match(text)
        if not match:
            return text
        text = text[match.end() :].lstrip()


SUFFIX = re.compile(r"\b([A-Z][a-z]+) (n|i|ese|ian|an|ns|ians|ans|ish|ern)(?=[^\w]|\Z)")


def join_suffixes(lexicon: Lexicon) -> Callable[[str], tuple[str, int]]:
    """ "Australia n" -> "Australian", "Iraq i" -> "Iraqi": a link's adjective ending, split
    from the linked name. Joined only when the first part is a name and the corpus has the
    joined word elsewhere, so "Japan an aggressor", "From an update" and "Prawo i
    Sprawiedliwość" stay."""

    def apply(text: str) -> tuple[str, int]:
        joined_here = 0

        def join(match: re.Match[str]) -> str:
            nonlocal joined_here
            base, joined = match.group(1), match.group(1) + match.group(2)
            # A name: the corpus rarely writes it in lowercase ("Europe", not "Or an artist").
            name = lexicon.words[base.lower()] * 20 < lexicon.words[base]
            if name and lexicon.words[joined] > 0:
                joined_here += 1
                return joined
            return match.group(0)

        return SUFFIX.sub(join, text), joined_here

    return apply


def strip_lead(lexicon: Lexicon) -> Callable[[str], tuple[str, int]]:
    """Drop the template captions and markup tokens printed before an article's first sentence.

    A markup token or an infobox phrase always goes. A known caption (``Lexicon.captions``, or
    a Wikinews topic) goes when what follows cannot continue it: a sentence opener, a repeat,
    more markup, or a capitalised word that never follows it anywhere else in the corpus
    ("New Zealand Harry Doynhoven" goes; "United States President George W. Bush" stays, and
    "Iran is ..." or "United States officials said" are never touched: lowercase follows).
    """
    topic = re.compile(TOPICS, re.IGNORECASE)

    def caption_at_start(text: str) -> int:
        """The length of the caption that ``text`` starts with, or 0."""
        words = text.split(" ", 7)  # up to 5 caption words, the next two, the rest
        for n in range(min(5, len(words) - 1), 0, -1):
            head = " ".join(words[:n])
            if head.lower() not in lexicon.captions and not topic.fullmatch(head):
                continue
            after = words[n]
            if CATEGORY_TOPIC.fullmatch(head):
                return len(head)  # never prose: "Economy and business mining company ..."
            rest = text[len(head) :].lstrip()
            if after == words[0] or LEAD_TOKEN.match(rest) or LEAD_INFOBOX.match(rest):
                return len(head)  # "Thailand Thailand 's ...", "Iraq publish ..."
            if not (after[:1].isupper() or after[:1].isdigit()):
                return 0  # "Iran is ...", "United States officials said ..."
            if after in OPENERS:
                # Never a continuation, unless the corpus has these words elsewhere too
                # ("Research In Motion"; the next word too, as glitches mid-text are common).
                following = words[n + 1] if n + 1 < len(words) else ""
                return 0 if lexicon.continues(f"{head} {after} {following}") else len(head)
            if lexicon.continues(f"{head} {after}"):
                return 0  # "United States President ...", "Canada Post ..."
            return len(head)
        return 0

    def apply(text: str) -> tuple[str, int]:
        count = 0
        while True:
            match = LEAD_TOKEN.match(text) or LEAD_INFOBOX.match(text)
            size = match.end() if match else caption_at_start(text)
            if not size:
                return text, count
            text = text[size:].lstrip()
            count += 1

    return apply


# At the end: markup tokens and the headings of sections whose lists were lost.
TRAILER = re.compile(
    r"""(?:\s+(?:
        [Pp]ublish | Archive-unreviewed | Haveyoursay | left | right | =+ | \*+ | \}\} | \]\]
      | [Rr]elated(?:\ [Ww]ikinews|\ news)?\. | Sources\. | External\ links\.
    ))+\s*\Z""",
    re.VERBOSE,
)


def table_opening(text: str) -> tuple[str, int]:
    """An unclosed table: its opening and attributes go, up to its first cell."""
    return TABLE_OPENING.subn(" ", text) if "{|" in text else (text, 0)


def bracketed_image(text: str) -> tuple[str, int]:
    text, closed = BRACKETED_IMAGE.subn(" ", text)
    text, cut = OPEN_IMAGE.subn(" ", text)
    return text, closed + cut


def category_links(lexicon: Lexicon) -> Callable[[str], tuple[str, int]]:
    """ "Category:Iran Category:Economy and business ...": the category links of a page. A link
    runs to the next one; the last one of a run is one word, or a known caption or topic
    ("Category:Politics and conflicts Iran Manouchehr Mottaki ..."), unless it ends the text."""
    link = re.compile(r"Category:(\S+(?: \S+){0,4})")

    def name_length(words: str) -> int:
        parts = words.split()
        for n in range(len(parts), 1, -1):
            head = " ".join(parts[:n])
            if head.lower() in lexicon.captions or re.fullmatch(TOPICS, head, re.IGNORECASE):
                return len(head)
        return len(parts[0])

    def apply(text: str) -> tuple[str, int]:
        count = 0
        while (match := link.search(text)) is not None:
            rest = text[match.start(1) :]
            following = rest.find("Category:")
            if following >= 0:
                end = match.start(1) + following
            elif not rest.strip() or len(rest) < 80 and not re.search(r"[.!?]", rest):
                end = len(text)  # the last links of the page
            else:
                end = match.start(1) + name_length(match.group(1))
            text = text[: match.start()] + " " + text[end:]
            count += 1
        return text, count

    return apply


def rules(lexicon: Lexicon) -> list[Rule]:
    """The rules in the order they run (markup blocks first, then the lead, then words)."""
    return [
        Rule("wiki table {| ... |}", _sub(TABLE, " ")),
        Rule("opening of a cut table {| ... |", table_opening),
        Rule("[[File:/Image: ...]] picture", bracketed_image),
        Rule("Image:name.jpg|caption gallery item", _sub(GALLERY_ITEM, " ")),
        Rule("table cells | ... | ... | ...", _sub(TABLE_CELLS, " ")),
        Rule("table row |- | ...", _sub(TABLE_ROW, " ")),
        Rule("thumb:: caption label", _sub(THUMB_LABEL)),
        Rule("[[target|text]] link", _sub(LINK, r"\1")),
        Rule("Category: links", category_links(lexicon)),
        Rule("__MAGIC__ word", _sub(MAGIC_WORD, " ")),
        Rule("Template:Name", _sub(TEMPLATE, " ")),
        Rule("template id after a sentence", _sub(TEMPLATE_ID)),
        Rule("infobox name after a sentence", _sub(INFOBOX)),
        Rule("split adjective ending (Africa n)", join_suffixes(lexicon)),
        Rule(LEAD_RULE, strip_lead(lexicon)),
        Rule("markup or empty heading at the end", _sub(TRAILER)),
        Rule("stray ]] [[ }} {{", _sub(STRAY_BRACKETS, " ")),
        Rule("space before 's (Dre 's)", _sub(re.compile(r"(?<=\w) (?='s\b)"))),
        Rule("space before -based (US -based)", _sub(re.compile(r"(?<=[\w.]) (?=-[a-z])"))),
        Rule("empty parentheses ()", _sub(re.compile(r" ?\(\s*[,;]?\s*\)"))),
        Rule("doubled comma ,,", _sub(re.compile(r",(?:\s*,)+"), ",")),
        Rule("runs of spaces", _sub(re.compile(r"(?<=\S)\s{2,}(?=\S)"), " ")),
    ]


def clean_text(text: str, active: list[Rule], tally: Tally, article: int) -> str:
    for rule in active:
        new, count = rule.apply(text)
        new = new.strip()
        if new != text:
            tally.add(rule.name, article, max(count, 1))
        text = new
    return text


def clean_records(records: list[dict]) -> tuple[list[dict], Tally, Tally]:
    """The records with ``text`` and ``title`` cleaned, and what changed in each (titles have
    no lead, so the lead rule does not run on them).

    One pass can uncover more (a caption behind a removed token) and changes what the corpus
    teaches (``Lexicon``), so passes repeat until one changes nothing: cleaning the result
    again is then a no-op by construction.
    """
    texts, titles = Tally(), Tally()
    for _ in range(MAX_PASSES):
        lexicon = Lexicon.learn(r["text"] for r in records)
        text_rules = rules(lexicon)
        title_rules = [r for r in text_rules if r.name != LEAD_RULE]
        cleaned = []
        for i, record in enumerate(records):
            record = dict(record)
            record["text"] = clean_text(record["text"], text_rules, texts, i)
            record["title"] = clean_text(record["title"], title_rules, titles, i)
            cleaned.append(record)
        if cleaned == records:
            break
        records = cleaned
    return records, texts, titles


def read(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def encode(records: list[dict]) -> bytes:
    """The file's bytes: the same JSON layout and gzip header every time (mtime 0)."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    buffer = io.BytesIO()
    with gzip.GzipFile("wikinews.jsonl", "wb", compresslevel=9, fileobj=buffer, mtime=0) as out:
        out.write(text.encode("utf-8"))
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if dirty")
    args = parser.parse_args(argv)
    records = read(args.path)
    cleaned, texts, titles = clean_records(records)
    changed = sum(a != b for a, b in zip(records, cleaned, strict=True))
    names = [rule.name for rule in rules(Lexicon(Counter(), set(), ""))]
    for label, tally in (("text", texts), ("title", titles)):
        print(f"{label + ': rule':<52} {'articles':>8} {'places':>7}")
        for name in names:
            if tally.places[name]:
                print(f"{name:<52} {len(tally.articles[name]):>8} {tally.places[name]:>7}")
    print(f"{changed} of {len(records)} articles changed")
    if args.check:
        return 1 if changed else 0
    if changed:
        args.path.write_bytes(encode(cleaned))
        print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
