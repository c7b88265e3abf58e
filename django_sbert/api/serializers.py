"""Request and response serializers of the sbert API.

The body of embed/ is checked strictly: wrong JSON types (``"texts": "abc"``, ``"texts": [1]``,
``"normalize": "yes"``) are errors rather than coerced, and unknown keys are rejected, so a
client's typo is reported instead of silently ignored. Query parameters are strings by nature;
their serializers reject what does not parse (``k=1.5``, ``min_similarity=nan``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.core.validators import MaxLengthValidator, MaxValueValidator
from rest_framework import serializers
from rest_framework.fields import SkipField

from ..conf import sbert_settings
from .schema import extend_schema_field
from .settings import APISettings, api_settings


def cap(field: serializers.Field, limit: int, message: str) -> None:
    """Bound ``field`` by a limit read from the settings when the serializer is built: an
    integer's value, else a length. Both the schema (``max_value`` / ``max_length``) and the
    validation, with ``message``, follow it."""
    if isinstance(field, serializers.IntegerField):
        field.max_value = limit
        field.validators.append(MaxValueValidator(limit, message=message))
    else:
        field.max_length = limit
        field.validators.append(MaxLengthValidator(limit, message=message))


def without_empty(kwargs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``kwargs`` whose ``data`` leaves out the empty ``names``: an empty optional query
    parameter (``?k=``) means "not given", as in a form."""
    data = kwargs.get("data")
    if data is not None:
        kwargs["data"] = {k: v for k, v in data.items() if not (k in names and v == "")}
    return kwargs


class StrictCharField(serializers.CharField):
    """A CharField that accepts JSON strings only (DRF's turns 12 into "12")."""

    default_error_messages = {"invalid": "Must be a string, not {type}."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid", type=type(data).__name__)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A BooleanField that accepts JSON ``true``/``false`` only."""

    default_error_messages = {"invalid": "Must be true or false (a JSON boolean)."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class FiniteFloatField(serializers.FloatField):
    """A FloatField that rejects nan and inf (which pass min_value/max_value comparisons)."""

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


class NoUnknownKeysMixin:
    """Reject keys the serializer does not declare, naming the valid ones.

    Reported together with the other errors, so ``{"text": [...]}`` says both that ``texts`` is
    required and that ``text`` is unknown.
    """

    def to_internal_value(self, data: Any) -> Any:
        fields = self.fields  # type: ignore[attr-defined]
        unknown = sorted(set(data) - set(fields)) if isinstance(data, Mapping) else []
        message = f"Unknown field. Valid fields: {', '.join(fields)}."
        errors: dict[str, Any] = {str(key): [message] for key in unknown}
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **errors}) from exc
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value


# -- search/ and similar/ --------------------------------------------------------------------


class SimilarQuerySerializer(serializers.Serializer):
    """Query parameters of similar/: how many results, how similar, which EmbeddingField."""

    k = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="Number of results in all pages together (default SBERT['SEARCH']['K']).",
    )
    min_similarity = FiniteFloatField(
        required=False,
        min_value=-1.0,
        max_value=1.0,
        help_text="Leave out results whose cosine similarity is below this (-1 to 1).",
    )
    field = serializers.CharField(
        required=False,
        help_text="Which EmbeddingField to search when the model has several.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **without_empty(kwargs, ("k", "min_similarity", "field")))
        max_k = int(api_settings.MAX_K)
        cap(
            self.fields["k"],
            max_k,
            f"k must be at most {max_k} (SBERT['API']['MAX_K']); use pagination within those "
            "results, or ask for fewer.",
        )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("k", int(sbert_settings.SEARCH["K"] or api_settings.MAX_K))
        return attrs


SEARCH_MODES = ("vector", "hybrid", "keyword")


class SearchQuerySerializer(SimilarQuerySerializer):
    """Query parameters of search/: the model to search, the query text, the kind of search."""

    model = serializers.CharField(
        help_text="The model to search, as app_label.model_name (e.g. blog.article); only "
        "registered models are searchable.",
        error_messages={
            "required": "Pass ?model=app_label.model_name, one of the registered models.",
            "blank": "Pass ?model=app_label.model_name, one of the registered models.",
        },
    )
    q = serializers.CharField(
        help_text="The search text; it is encoded and compared with the stored embeddings.",
        error_messages={
            "required": "Pass the search text as ?q=...",
            "blank": "The search text ?q= is empty; pass some words to search for.",
        },
    )
    mode = serializers.ChoiceField(
        choices=SEARCH_MODES,
        default="vector",
        help_text="vector: cosine similarity of sentence embeddings (default). keyword: "
        'PostgreSQL full-text search (web search syntax: every word, "a phrase", -not, or). '
        "hybrid: both, fused (reciprocal rank fusion unless the settings or the serving "
        "encoder version chose linear fusion). keyword and hybrid need a model whose "
        "EmbeddingField has keyword_search=True.",
        error_messages={
            "invalid_choice": "Unknown mode {input!r}; use one of: " + ", ".join(SEARCH_MODES) + "."
        },
    )
    field_order = ("model", "q", "mode", "k", "min_similarity", "field")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **without_empty(kwargs, ("mode",)))
        limit = int(sbert_settings.SEARCH["MAX_QUERY_LENGTH"])
        cap(
            self.fields["q"],
            limit,
            f"q is longer than {limit} characters (SBERT['SEARCH']['MAX_QUERY_LENGTH']); "
            "shorten the search text.",
        )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if attrs.get("mode", "vector") != "vector" and attrs.get("min_similarity") is not None:
            raise serializers.ValidationError(
                {
                    "min_similarity": f"min_similarity applies to mode=vector only, not "
                    f"mode={attrs['mode']}; leave it out, or search with mode=vector."
                }
            )
        return attrs


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}]})
class PrimaryKeyField(serializers.ReadOnlyField):
    """The row's primary key as it is (an integer, or a string for UUID and text keys)."""


class PassageSerializer(serializers.Serializer):
    """The passage of a row's text that matched the query best (fields with passages=)."""

    text = serializers.CharField(read_only=True, help_text="The passage.")
    start = serializers.IntegerField(
        read_only=True, help_text="Offset of its first character in the row's source text."
    )
    end = serializers.IntegerField(
        read_only=True, help_text="Offset just after its last character: text[start:end]."
    )
    index = serializers.IntegerField(
        read_only=True, help_text="Its position among the row's passages, from 0."
    )

    def get_attribute(self, instance: Any) -> Any:
        # Left out of the results of a field without passages (the row has no such value);
        # null for a row that has none (a hybrid result found by its words alone).
        if isinstance(instance, Mapping):
            present = "passage" in instance
        else:
            present = hasattr(instance, "passage")
        if not present:
            raise SkipField()
        return super().get_attribute(instance)


def passage_field() -> PassageSerializer:
    return PassageSerializer(
        read_only=True,
        required=False,
        allow_null=True,
        help_text="Only for a field with passages=: the row's best passage for q and where it "
        "lies in the row's text (its similarity is the row's); null when the row has none.",
    )


class ClickTokenField(serializers.CharField):
    """A logged result's signed click token (POST it to events/); left out when the search
    was not logged (``SBERT["FEEDBACK"]["LOG"]`` off, sampled out, a later page)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("source", "sbert_click_token")
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "help_text",
            "Only when the search was logged: the token to POST to events/ when the result "
            "is clicked or converts (docs/learning.md).",
        )
        super().__init__(**kwargs)

    def get_attribute(self, instance: Any) -> Any:
        token = getattr(instance, "sbert_click_token", None)
        if token is None:
            raise SkipField()
        return token


class SearchResultSerializer(serializers.Serializer):
    """One result: the row's primary key, its cosine similarity, the registered fields."""

    id = PrimaryKeyField(source="pk", help_text="Primary key of the row.")
    similarity = serializers.FloatField(
        read_only=True, help_text="Cosine similarity with the query, -1 to 1; higher is closer."
    )
    passage = passage_field()
    object = serializers.DictField(
        read_only=True, help_text="The fields the model was registered with."
    )
    click_token = ClickTokenField()


class KeywordResultSerializer(serializers.Serializer):
    """One result of mode=keyword: the row's primary key, its full-text rank, its fields."""

    id = PrimaryKeyField(source="pk", help_text="Primary key of the row.")
    keyword_score = serializers.FloatField(
        read_only=True, help_text="PostgreSQL ts_rank_cd of the row for q; higher is better."
    )
    object = serializers.DictField(
        read_only=True, help_text="The fields the model was registered with."
    )
    click_token = ClickTokenField()


class HybridResultSerializer(serializers.Serializer):
    """One result of mode=hybrid: the fused score and what it was fused from."""

    id = PrimaryKeyField(source="pk", help_text="Primary key of the row.")
    score = serializers.FloatField(
        read_only=True,
        help_text="Fused score: the sum over vector and keyword search of weight / (rrf_k + "
        "rank) (reciprocal rank fusion), or of weight * the side's normalised score (linear "
        "fusion); higher is better.",
    )
    similarity = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="Cosine similarity with the query; null when the row has no embedding yet.",
    )
    vector_rank = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Position (from 1) in the vector search candidates; null when not among them.",
    )
    keyword_rank = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Position (from 1) in the full-text candidates; null when not among them.",
    )
    keyword_score = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="PostgreSQL ts_rank_cd of the row; null when not among the full-text candidates.",
    )
    passage = passage_field()
    object = serializers.DictField(
        read_only=True, help_text="The fields the model was registered with."
    )
    click_token = ClickTokenField()


RESULT_SERIALIZERS: dict[str, type[serializers.Serializer]] = {
    "vector": SearchResultSerializer,
    "hybrid": HybridResultSerializer,
    "keyword": KeywordResultSerializer,
}

_result_serializers: dict[tuple[type[serializers.BaseSerializer], str], type] = {}


def result_serializer_for(
    object_serializer: type[serializers.BaseSerializer], mode: str = "vector"
) -> type[serializers.Serializer]:
    """The result serializer of ``mode`` whose ``object`` is ``object_serializer`` (built once)."""
    key = (object_serializer, mode)
    result = _result_serializers.get(key)
    if result is None:
        suffix = {"vector": "", "hybrid": "Hybrid", "keyword": "Keyword"}[mode]
        result = type(
            f"{object_serializer.__name__}{suffix}Result",
            (RESULT_SERIALIZERS[mode],),
            {"object": object_serializer(source="*", read_only=True), "__module__": __name__},
        )
        _result_serializers[key] = result
    return result


# -- suggest/ --------------------------------------------------------------------------------


class SuggestQuerySerializer(serializers.Serializer):
    """Query parameters of suggest/: the text typed so far, how many suggestions, which field."""

    q = serializers.CharField(
        allow_blank=True,
        trim_whitespace=False,  # a trailing space says the last word is finished
        help_text="The text typed so far; the last word, unless followed by a space, is read "
        "as a prefix. Shorter than 2 characters (spaces aside): no suggestions.",
        error_messages={"required": "Pass the text typed so far as ?q=..."},
    )
    k = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="Number of suggestions (default SBERT['SEARCH']['SUGGEST']['K'], at most "
        f"{APISettings.SUGGEST_MAX_K}).",
    )
    field = serializers.CharField(
        required=False, help_text="Which EmbeddingField to search when the model has several."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **without_empty(kwargs, ("k", "field")))
        max_k = int(api_settings.SUGGEST_MAX_K)
        cap(self.fields["k"], max_k, f"k must be at most {max_k}.")
        limit = int(api_settings.SUGGEST_MAX_QUERY_LENGTH)
        cap(
            self.fields["q"],
            limit,
            f"q is longer than {limit} characters; suggestions are for a search box: search/ "
            "takes longer texts.",
        )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("k", int(sbert_settings.SEARCH["SUGGEST"]["K"]))
        return attrs


class SuggestionSerializer(serializers.Serializer):
    """One suggestion: the row, what to show for it, where it leads, how it was found."""

    id = PrimaryKeyField(source="pk", help_text="Primary key of the row.")
    label = serializers.SerializerMethodField(
        help_text="The first source field of the EmbeddingField (a title, usually), when the "
        "model was registered with that field among its fields; else null."
    )
    url = serializers.CharField(
        read_only=True, allow_null=True, help_text="The row's get_absolute_url(), or null."
    )
    score = serializers.FloatField(
        read_only=True, help_text="Fused score: sum of 1 / (rrf_k + rank) over both lists."
    )
    keyword_rank = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Position (from 1) among the prefix matches; null when not among them.",
    )
    vector_rank = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Position (from 1) among the nearest rows by meaning; null when not among "
        "them (and for texts too short to be encoded).",
    )
    object = serializers.DictField(
        read_only=True, help_text="The fields the model was registered with."
    )

    def get_label(self, suggestion: Any) -> str | None:
        return suggestion.label if self.context.get("show_label") else None


_suggestion_serializers: dict[type[serializers.BaseSerializer], type] = {}


def suggestion_serializer_for(
    object_serializer: type[serializers.BaseSerializer],
) -> type[serializers.Serializer]:
    """SuggestionSerializer whose ``object`` is ``object_serializer`` (built once)."""
    result = _suggestion_serializers.get(object_serializer)
    if result is None:
        result = type(
            f"{object_serializer.__name__}Suggestion",
            (SuggestionSerializer,),
            {
                "object": object_serializer(read_only=True),
                "__module__": __name__,
            },
        )
        _suggestion_serializers[object_serializer] = result
    return result


# -- events/ ---------------------------------------------------------------------------------


class EventRequestSerializer(NoUnknownKeysMixin, serializers.Serializer):
    """Body of POST events/: what the visitor did with one logged result."""

    token = StrictCharField(
        max_length=1000,
        help_text="The result's click_token, from search/ (or data-sbert-click on a page).",
        error_messages={"required": "Pass the result's click_token as token."},
    )
    kind = StrictCharField(
        default="click",
        max_length=40,
        help_text='"click" (default) or one of SBERT["FEEDBACK"]["CONVERSIONS"].',
    )
    dwell_ms = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        help_text="How long the visitor stayed on the result, in milliseconds.",
    )


# -- embed/ ----------------------------------------------------------------------------------


class EmbedRequestSerializer(NoUnknownKeysMixin, serializers.Serializer):
    """Body of POST embed/: texts to encode with one of the configured encoders."""

    texts = serializers.ListField(
        child=StrictCharField(trim_whitespace=False, allow_blank=False),
        allow_empty=False,
        help_text=f"The texts to encode (at most {APISettings.EMBED_MAX_TEXTS}, each at most "
        f"{APISettings.EMBED_MAX_TEXT_LENGTH} characters).",
    )
    normalize = StrictBooleanField(
        default=True, help_text="Scale each vector to unit length (cosine = dot product)."
    )
    encoder = StrictCharField(
        default="default", help_text="Name of an encoder in SBERT['ENCODERS']."
    )
    prompt = serializers.ChoiceField(
        choices=["query", "document"],
        allow_null=True,
        default=None,
        help_text="Put the encoder's query or document prompt before each text (QUERY_PROMPT / "
        "DOCUMENT_PROMPT, else the model's own): 'query' gives the vectors searches compare, "
        "'document' those indexing stores. null (default): the texts as given.",
        error_messages={"invalid_choice": "prompt must be 'query', 'document' or null."},
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        max_texts = int(api_settings.EMBED_MAX_TEXTS)
        max_length = int(api_settings.EMBED_MAX_TEXT_LENGTH)
        texts = self.fields["texts"]
        cap(
            texts,
            max_texts,
            f"At most {max_texts} texts per request; split them over several requests.",
        )
        cap(
            texts.child,
            max_length,
            f"Each text may have at most {max_length} characters; shorten or split it.",
        )

    def validate_encoder(self, value: str) -> str:
        names = sorted(sbert_settings.ENCODERS or {})
        if value not in names:
            # The names only for staff (the view says so in the context): they are the
            # site's setup, not something a client needs to learn by guessing.
            known = (
                f"; configured encoders: {', '.join(names)}"
                if self.context.get("list_encoders")
                else ""
            )
            raise serializers.ValidationError(f"Unknown encoder {value!r}{known}.")
        return value


class EmbedResponseSerializer(serializers.Serializer):
    """Response of POST embed/: one vector per text, in the order given."""

    encoder = serializers.CharField(help_text="The encoder that produced the vectors.")
    dimensions = serializers.IntegerField(help_text="Length of each vector.")
    vectors = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField()),
        help_text="One float32 vector per text, in the order of the request's texts.",
    )
