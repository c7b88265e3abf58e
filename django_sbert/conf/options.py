"""``Option``: one bounded option (default, bounds or choices, help) and everything built
from it: the check of a value, a form field, a serializer field, a command-line flag and a
settings rule. The training options (``finetuning.options.OPTIONS``) and the pair options
(``declaration.PAIR_OPTIONS``: the admin's form, ``sbert_make_pairs``' flags, the settings'
``FEEDBACK`` keys, ``feedback.pairs``' check) are declared in it, once each.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.validators import BaseValidator
from django.utils.deconstruct import deconstructible

from .schema import Rule, Setting


@deconstructible
class _AboveValidator(BaseValidator):
    """An open lower bound (Django's ``MinValueValidator`` is closed)."""

    message = "Ensure this value is greater than %(limit_value)s."
    code = "min_value"

    def compare(self, a: Any, b: Any) -> bool:
        return bool(a <= b)


@deconstructible
class _BelowValidator(BaseValidator):
    """An open upper bound (Django's ``MaxValueValidator`` is closed)."""

    message = "Ensure this value is less than %(limit_value)s."
    code = "max_value"

    def compare(self, a: Any, b: Any) -> bool:
        return bool(a >= b)


@dataclass(frozen=True)
class Option:
    """One option: what it is, what it accepts and what it is when not given.

    ``default`` None: decided elsewhere, as ``default_text`` says (the loss's recipe, the pairs'
    shape). ``minimum`` / ``maximum`` are inclusive unless ``open_minimum`` / ``open_maximum``.
    """

    name: str
    type: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    open_minimum: bool = False
    open_maximum: bool = False
    choices: tuple[str, ...] = ()
    default_text: str = ""

    @property
    def flag(self) -> str:
        """The command-line flag: ``--batch-size``."""
        return "--" + self.name.replace("_", "-")

    @property
    def bounds_text(self) -> str:
        """What the option accepts, in words: ``a whole number from 1 to 100``."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        if self.type is bool:
            return "true or false"
        lo, hi = _number(self.minimum), _number(self.maximum)
        if self.open_minimum or self.open_maximum:
            left = "(" if self.open_minimum else "["
            right = ")" if self.open_maximum else "]"
            return f"in {left}{lo}, {hi}{right}"
        kind = "a whole number" if self.type is int else "a number"
        if self.maximum is None:
            return f"{kind} >= {lo}"
        return f"{kind} from {lo} to {hi}"

    @property
    def default_description(self) -> str:
        """The default in words, for help texts and the docs."""
        if self.default_text:
            return self.default_text
        if self.type is bool:
            return "on" if self.default else "off"
        return _number(self.default)

    @property
    def help_text(self) -> str:
        """``help`` and the default, for a form field, an API field or a flag."""
        return f"{self.help} Default: {self.default_description}."

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is refused (``"epochs must be ..., got 0"``), or None when it fits."""
        if value is None and self.default is None and not self.choices:
            return None  # left to the recipe (epochs, learning_rate) or to fit (eval_every)
        numbers = (int,) if self.type is int else (int, float)
        if self.choices:
            fits = value in self.choices
        elif self.type is bool:
            fits = isinstance(value, bool)
        elif isinstance(value, bool) or not isinstance(value, numbers):
            fits = False
        else:
            fits = math.isfinite(value) and self._within(value)
        return None if fits else f"{self.name} must be {self.bounds_text}, got {value!r}"

    def _within(self, value: float) -> bool:
        if self.minimum is not None and (
            value <= self.minimum if self.open_minimum else value < self.minimum
        ):
            return False
        return self.maximum is None or (
            value < self.maximum if self.open_maximum else value <= self.maximum
        )

    def field_bounds(self) -> dict[str, Any]:
        """``min_value``, ``max_value`` and ``validators`` keywords for a Django form field or
        a DRF serializer field: closed bounds as the field's own, open ones as validators."""
        keywords: dict[str, Any] = {}
        validators: list[Any] = []
        if self.minimum is not None:
            if self.open_minimum:
                validators.append(_AboveValidator(self.minimum))
            else:
                keywords["min_value"] = self.minimum
        if self.maximum is not None:
            if self.open_maximum:
                validators.append(_BelowValidator(self.maximum))
            else:
                keywords["max_value"] = self.maximum
        if validators:
            keywords["validators"] = validators
        return keywords

    def parse(self, text: str) -> Any:
        """A command-line value, checked (argparse's ``type=``)."""
        try:
            value = self.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{self.name} must be {self.bounds_text}, got {text!r}"
            ) from None
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    # What is built from it.

    def rule(self) -> Rule:
        """The settings' rule of a key that holds this option's default."""
        return Rule(lambda value: self.problem(value) is None, self.bounds_text)

    def setting(self, doc: str | None = None) -> Setting:
        """A settings key whose default and rule are this option's."""
        return Setting(self.default, doc or self.help, self.rule())

    def form_field(self, initial: Any = None) -> forms.Field:
        """A form field: its bounds, ``initial`` (else the default) shown; left empty, a number
        or a choice is None (the caller's default)."""
        shown = self.default if initial is None else initial
        if self.choices:
            choices = [(name, name) for name in self.choices]
            required = self.default is None and initial is None
            field: forms.Field = forms.ChoiceField(choices=choices, required=required)
        elif self.type is bool:
            field = forms.BooleanField(required=False)
        else:
            number = forms.IntegerField if self.type is int else forms.FloatField
            field = number(required=False, **self.field_bounds())
        field.initial, field.help_text = shown, self.help_text
        return field

    def serializer_field(self) -> Any:
        """A DRF serializer field: its bounds, and its default when left out (an option whose
        default is decided later may also be null)."""
        # DRF is the API's dependency: imported where a serializer is built.
        from rest_framework import serializers

        if self.default is None:
            given: dict[str, Any] = {"required": False, "allow_null": True}
        else:
            given = {"default": self.default}
        if self.choices:
            return serializers.ChoiceField(choices=self.choices, help_text=self.help_text, **given)
        if self.type is bool:
            return serializers.BooleanField(help_text=self.help_text, **given)
        number = serializers.IntegerField if self.type is int else serializers.FloatField
        return number(help_text=self.help_text, **given, **self.field_bounds())

    def add_argument(self, parser: Any, help: str | None = None) -> None:
        """Its command-line flag, checked as it is parsed; not given, it is None (the caller's
        default)."""
        if self.choices:
            kind: dict[str, Any] = {"choices": self.choices}
        elif self.type is bool:
            kind = {"action": argparse.BooleanOptionalAction}
        else:
            kind = {"type": self.parse, "metavar": self.type.__name__.upper()}
        parser.add_argument(self.flag, help=help or self.help_text, **kind)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
