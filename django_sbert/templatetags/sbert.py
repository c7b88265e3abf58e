"""``{% load sbert %}``: a result's best passage, its similarity, "more like this", clicks.

::

    {% load sbert %}
    {% for hit in hits %}
      <h3>{{ hit.title }}</h3> {% sbert_similarity hit %}
      <p>{% sbert_passage hit chars=300 %}</p>
    {% endfor %}
    {% sbert_similar article 5 queryset=visible %}  {# a list, django_sbert/tags/similar.html #}
    {% sbert_similar article 5 queryset=visible as similar %}  {# or the rows, to lay out #}
    <a href="{{ hit.get_absolute_url }}" {% sbert_click_attrs hit %}>   {# a logged result #}
    {% sbert_click_script %}                       {# reports clicks on such links #}

docs/reference.md describes each tag. ``sbert_similar`` ranks within ``queryset=`` (pass the
rows this page's visitor may see; left out: every row of the model's default manager, drafts
and private rows included).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from typing import Any

from django import template
from django.core.cache import cache
from django.core.exceptions import EmptyResultSet
from django.db.models import Manager, Model, QuerySet
from django.template.base import Parser, Token
from django.template.context import Context
from django.template.library import InclusionNode, parse_bits
from django.templatetags.static import static
from django.urls import NoReverseMatch, reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString

from ..exceptions import ServiceUnavailable, UnversionedVector
from ..feedback import logging_on
from ..fields import EmbeddingField, embedding_fields
from ..query import as_semantic
from ..serving import encoder_version

register = template.Library()
logger = logging.getLogger(__name__)

SIMILARITY_TEMPLATE = "django_sbert/tags/similarity.html"
SIMILAR_TEMPLATE = "django_sbert/tags/similar.html"
ELLIPSIS = "…"
# How long {% sbert_similar %} keeps a row's similar rows in Django's default cache (keyed by
# the serving version, so a promotion is seen at once); 0: not cached.
SIMILAR_CACHE_SECONDS = 300.0


def _value(hit: Any, name: str) -> Any:
    """``hit.name`` for an instance, ``hit[name]`` for a ``values()`` row; None when absent."""
    if isinstance(hit, dict):
        return hit.get(name)
    return getattr(hit, name, None)


# -- the best passage ------------------------------------------------------------------------


def _cut_left(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text`` at most, starting at a word ("…" if cut)."""
    if len(text) <= chars:
        return text
    if chars <= 1:
        return ELLIPSIS if chars == 1 else ""
    kept = text[len(text) - chars + 1 :]
    if " " in kept and not text[len(text) - chars].isspace():
        kept = kept.split(" ", 1)[1]  # drop the partial word
    return ELLIPSIS + kept.lstrip()


def _cut_right(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text`` at most, ending at a word ("…" if cut)."""
    if len(text) <= chars:
        return text
    if chars <= 1:
        return ELLIPSIS if chars == 1 else ""
    kept = text[: chars - 1]
    if " " in kept and not text[chars - 1].isspace():
        kept = kept.rsplit(" ", 1)[0]  # drop the partial word
    return kept.rstrip() + ELLIPSIS


@register.simple_tag
def sbert_passage(hit: Any, chars: int | None = None) -> SafeString:
    """``hit.snippet`` as ``before<mark>match</mark>after``, each part escaped.

    Without a snippet: the best passage's text (``hit.passage["text"]``), escaped, or nothing.
    ``chars`` caps the characters shown: the context is cut evenly on both sides at a word
    (the sentence itself only when it alone is longer).
    """
    snippet = _value(hit, "snippet")
    if snippet is None:
        passage = _value(hit, "passage") or {}
        text = (passage.get("text") or "") if isinstance(passage, dict) else ""
        return conditional_escape(text if chars is None else _cut_right(text, max(0, int(chars))))
    before, match, after = snippet.before, snippet.match, snippet.after
    chars = None if chars is None else max(0, int(chars))
    if chars is not None and len(before) + len(match) + len(after) > chars:
        if len(match) >= chars:
            before, match, after = "", _cut_right(match, chars), ""
        else:
            room = chars - len(match)
            left = min(len(before), room // 2)
            right = min(len(after), room - left)
            left = min(len(before), room - right)  # what the right side did not use
            before, after = _cut_left(before, left), _cut_right(after, right)
    return format_html("{}<mark>{}</mark>{}", before, match, after)


# -- the similarity --------------------------------------------------------------------------


@register.inclusion_tag(SIMILARITY_TEMPLATE)
def sbert_similarity(hit: Any) -> dict[str, Any]:
    """``hit.similarity`` (cosine, 1 = same direction) as a number with 2 decimals and a bar.

    Hybrid results show their ``similarity`` too, not the fused ``score``: a rank fusion's
    scores (about 0.03) mean nothing on a 0-1 bar, and a row the keyword side alone found has
    no similarity, so it shows nothing. The bar runs from 0 to 1 (a negative cosine: empty).
    """
    value = _value(hit, "similarity")
    if value is None:
        return {"similarity": None}
    value = float(value)
    number = f"{value:.2f}"
    return {
        "similarity": value,
        "number": number,
        # Unlocalized: the meter's value attribute needs a dot whatever the language.
        "bar": f"{min(max(value, 0.0), 1.0):.4f}",
        "percent": round(100 * min(max(value, 0.0), 1.0)),
        "title": f"Cosine similarity {number}",
    }


# -- more like this --------------------------------------------------------------------------


def _embedding_field(model: type[Model], name: str | None) -> EmbeddingField:
    fields = embedding_fields(model)
    if name is not None:
        fields = [f for f in fields if f.name == name]
    if len(fields) != 1:
        known = ", ".join(f.name for f in embedding_fields(model)) or "none"
        raise template.TemplateSyntaxError(
            f"sbert_similar: {model._meta.label} has {'no' if not fields else 'several'} "
            f"EmbeddingField{'' if name is None else f' {name!r}'} (it has: {known}); "
            'pass field="...".'
        )
    return fields[0]


def _loaded(obj: Model, attname: str) -> tuple[bool, Any]:
    """(whether ``obj`` holds the column, its value): a deferred column is not read here."""
    if attname in obj.get_deferred_fields():
        return False, None
    return True, getattr(obj, attname)


def _has_vector(obj: Model, field: EmbeddingField) -> bool:
    """Whether ``obj``'s row has a stored vector, reading the database only when neither the
    vector nor its version (written together) was loaded with ``obj``."""
    for attname in (field.attname, field.version_field_name):
        loaded, value = _loaded(obj, attname)
        if loaded:
            return value is not None
    return type(obj)._base_manager.filter(pk=obj.pk, **{f"{field.attname}__isnull": False}).exists()


def queryset_digest(queryset: QuerySet | None) -> str:
    """What ``queryset`` selects, as a sha256 of its SQL, parameters and database ("-" for
    None: the default manager's rows). Querysets that select different rows (another user's,
    drafts left out or not) get different digests, so their lists are cached apart."""
    if queryset is None:
        return "-"
    sql, params = queryset.query.sql_with_params()
    text = "\0".join((queryset.db, sql, repr(params)))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def similar_cache_key(
    obj: Model, k: int, field: EmbeddingField, queryset: QuerySet | None = None
) -> str:
    """The cache key of ``obj``'s ``k`` most similar rows within ``queryset``: the model, the
    field, the pk, ``k``, the field's serving encoder version, what the queryset selects
    (``queryset_digest``) and, when loaded, the hash of the text ``obj``'s vector was
    computed from (so a re-embedded row gets a fresh list)."""
    loaded, text_hash = _loaded(obj, field.hash_field_name)
    parts = (
        obj._meta.label,
        field.name,
        str(obj.pk),
        str(k),
        encoder_version(field.encoder),
        text_hash if loaded and text_hash else "-",
        queryset_digest(queryset),
    )
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"sbert:similar:{obj._meta.label_lower}:{digest}"  # short and memcached-safe


def _within(model: type[Model], queryset: QuerySet | Manager | None) -> QuerySet | None:
    """``queryset`` as a fresh QuerySet of ``model`` (None stays None)."""
    if queryset is None:
        return None
    if isinstance(queryset, Manager):
        queryset = queryset.all()
    if not isinstance(queryset, QuerySet) or queryset.model is not model:
        raise template.TemplateSyntaxError(
            f"sbert_similar: queryset= must be a QuerySet of {model._meta.label} (the rows "
            f"this page's visitor may see), got {queryset!r}."
        )
    return queryset.all()  # a clone: never a result cached on the page's queryset


def similar_rows(
    obj: Model | None,
    k: int = 5,
    field: str | None = None,
    queryset: QuerySet | Manager | None = None,
) -> list[Model]:
    """The ``k`` rows of ``queryset`` nearest to ``obj`` by its stored vector, nearest first,
    without ``obj``.

    Pass as ``queryset`` the rows the visitor may see (what a ``SearchView`` or a ModelAdmin's
    ``get_queryset()`` would list): left out, the model's default manager ranks every row,
    drafts and private rows included. Each row is annotated with ``similarity``. An ``obj``
    without a vector yet (or unsaved, or None) gives ``[]``. The list is kept in Django's
    default cache for ``SIMILAR_CACHE_SECONDS`` under ``similar_cache_key`` (which holds
    what ``queryset`` selects, so each queryset has its own list); a search that times out
    gives ``[]`` (logged, not cached), so a sidebar never breaks its page.
    """
    if obj is None or obj.pk is None:
        return []
    model = obj._meta.model
    embedding = _embedding_field(model, field)
    within = _within(model, queryset)
    seconds = SIMILAR_CACHE_SECONDS
    try:
        key = similar_cache_key(obj, k, embedding, within) if seconds > 0 else None
    except EmptyResultSet:  # queryset.none(), or a filter nothing can match
        return []
    if key is not None:
        rows = cache.get(key)
        if rows is not None:
            return rows
    if not _has_vector(obj, embedding):
        return []
    try:
        source = as_semantic(within if within is not None else model._default_manager.all())
        rows = list(source.similar_to(obj, field=embedding.name)[:k])
    except (ServiceUnavailable, UnversionedVector) as exc:
        logger.warning("sbert_similar: no similar rows for %s pk=%s: %s", model, obj.pk, exc)
        return []
    if key is not None:
        cache.set(key, rows, seconds)
    return rows


def _similar_context(
    obj: Model | None,
    k: int = 5,
    field: str | None = None,
    queryset: QuerySet | Manager | None = None,
) -> dict[str, Any]:
    return {"object": obj, "rows": similar_rows(obj, k, field, queryset)}


class SimilarNode(InclusionNode):
    """``{% sbert_similar obj k %}`` renders the list template; ``... as name`` sets ``name``
    to the rows instead and renders nothing."""

    def __init__(self, args: list[Any], kwargs: dict[str, Any], target: str | None) -> None:
        super().__init__(_similar_context, False, args, kwargs, SIMILAR_TEMPLATE)
        self.target = target

    def render(self, context: Context) -> str:
        if self.target is None:
            return super().render(context)
        args, kwargs = self.get_resolved_arguments(context)
        context[self.target] = similar_rows(*args, **kwargs)
        return ""


# parse_bits() is Django's own helper for tags like this one; Django 6.1 dropped its
# takes_context argument (False here), which 5.2 requires.
_NO_CONTEXT = (
    {"takes_context": False} if "takes_context" in inspect.signature(parse_bits).parameters else {}
)


@register.tag("sbert_similar")
def sbert_similar(parser: Parser, token: Token) -> SimilarNode:
    """``{% sbert_similar obj [k] [field="embedding"] [queryset=rows] [as name] %}``; ``k``
    defaults to 5; ``queryset``: the rows the visitor may see (``similar_rows``)."""
    bits = token.split_contents()
    name, bits = bits[0], bits[1:]
    target = None
    if len(bits) >= 2 and bits[-2] == "as":
        target, bits = bits[-1], bits[:-2]
    args, kwargs = parse_bits(
        parser,
        bits,
        params=["obj", "k"],
        varargs=None,
        varkw=None,
        defaults=(5,),
        kwonly=["field", "queryset"],
        kwonly_defaults={"field": None, "queryset": None},
        name=name,
        **_NO_CONTEXT,
    )
    return SimilarNode(args, kwargs, target)


# -- clicks on logged results ----------------------------------------------------------------


@register.simple_tag
def sbert_click_attrs(hit: Any) -> SafeString:
    """`` data-sbert-click="<token>"`` for a result with a click token; "" without one."""
    token = _value(hit, "sbert_click_token")
    if not token:
        return SafeString("")
    return format_html(' data-sbert-click="{}"', token)


@register.simple_tag
def sbert_click_script() -> SafeString:
    """The ``<script>`` of ``django_sbert/clicks.js``, pointed at the ``sbert/click/`` view;
    "" when searches are not logged, or ``django_sbert.urls`` is not mounted (with a
    warning: the clicks would have nowhere to go)."""
    if not logging_on():
        return SafeString("")
    try:
        url = reverse("django_sbert:click")
    except NoReverseMatch:
        logger.warning(
            "{% sbert_click_script %}: clicks are not reported, because the URL "
            "'django_sbert:click' is not mounted; add path(\"sbert/\", "
            'include("django_sbert.urls")) to your urls.py.'
        )
        return SafeString("")
    return format_html(
        '<script src="{}" data-sbert-click-url="{}" defer></script>',
        static("django_sbert/clicks.js"),
        url,
    )
