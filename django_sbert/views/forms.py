"""``SearchForm``: the query and the mode of a search page (``django_sbert.views.SearchView``).

::

    form = SearchForm(request.GET, modes=("hybrid", "vector"))
    if form.is_valid():
        form.cleaned_data["q"], form.cleaned_data["mode"]   # "" and "hybrid" when not given

``q`` is stripped and at most ``SBERT["SEARCH"]["MAX_QUERY_LENGTH"]`` characters; a blank one
is valid and means "no search yet". ``mode`` is one of the modes the view allows; left out
(or empty) it is the view's default mode, and an unknown one is a form error that lists the
allowed modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms
from django.core.validators import MaxLengthValidator
from django.utils.translation import gettext_lazy as _

from ..conf import sbert_settings

# What a visitor reads for each mode: a label, and a title saying what the mode does.
MODE_LABELS: dict[str, tuple[Any, Any]] = {
    "hybrid": (_("Hybrid"), _("meaning and words: vector and full-text search, fused")),
    "vector": (_("Meaning"), _("vector search: cosine similarity of Sentence-BERT vectors")),
    "keyword": (_("Words"), _("PostgreSQL full-text search")),
}
MODES = tuple(MODE_LABELS)


class SearchForm(forms.Form):
    """The search box (``q``) and the mode switch (``mode``) of a search page."""

    q = forms.CharField(label=_("Search"), required=False, strip=True)
    mode = forms.ChoiceField(label=_("Search by"), required=False, widget=forms.RadioSelect)

    def __init__(
        self,
        *args: Any,
        modes: Sequence[str] = MODES,
        default_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        unknown = [mode for mode in modes if mode not in MODE_LABELS]
        if unknown or not modes:
            raise ValueError(
                f"SearchForm modes must be a non-empty choice of {', '.join(MODES)}; "
                f"got {tuple(modes)!r}."
            )
        self.modes = tuple(modes)
        self.default_mode = default_mode or self.modes[0]
        if self.default_mode not in self.modes:
            raise ValueError(
                f"default_mode {self.default_mode!r} is not one of the modes {self.modes!r}."
            )
        # Read per form, so a change of the setting (override_settings) applies at once.
        longest = int(sbert_settings.SEARCH["MAX_QUERY_LENGTH"])
        query = self.fields["q"]
        query.max_length = longest
        query.validators.append(MaxLengthValidator(longest))
        query.widget.attrs.update(type="search", maxlength=str(longest))
        mode = self.fields["mode"]
        mode.choices = [(value, MODE_LABELS[value][0]) for value in self.modes]
        mode.initial = self.default_mode
        mode.error_messages["invalid_choice"] = _(
            "Unknown mode %%(value)s: this page searches by %s."
        ) % ", ".join(self.modes)

    def clean_mode(self) -> str:
        return self.cleaned_data.get("mode") or self.default_mode

    def mode_choices(self) -> list[tuple[str, Any, Any]]:
        """``(value, label, title)`` for each allowed mode, in the view's order."""
        return [(mode, *MODE_LABELS[mode]) for mode in self.modes]
