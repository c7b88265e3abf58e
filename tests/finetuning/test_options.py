"""The training options are declared once (``finetuning.options.OPTIONS``): the admin form, the
API serializer, ``sbert_train``'s flags, ``Hyperparameters.validate`` and the docs all follow it,
so a bound cannot differ between them again."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management.base import CommandError

from django_sbert.admin.finetuning import FineTuneForm
from django_sbert.api.finetuning import TrainingRunRequestSerializer
from django_sbert.finetuning.options import (
    OPTION_NAMES,
    OPTIONS,
    Hyperparameters,
    TrainingOption,
    options_table,
)
from django_sbert.management.commands.sbert_train import Command

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _cases(option: TrainingOption) -> list[tuple[object, bool]]:
    """(value, accepted) at and just beyond each bound of ``option``."""
    if option.choices:
        return [(option.choices[0], True), ("no-such-loss", False)]
    cases: list[tuple[object, bool]] = []
    step = 1 if option.type is int else 1e-6
    if option.minimum is not None:
        low = option.type(option.minimum)
        cases += [(low, not option.open_minimum), (option.type(low - step), False)]
        cases.append((option.type(low + step), True))
    if option.maximum is not None:
        high = option.type(option.maximum)
        cases += [(high, not option.open_maximum), (option.type(high + step), False)]
        cases.append((option.type(high - step), True))
    return cases


BOUNDED = [
    pytest.param(option, value, accepted, id=f"{option.name}={value}")
    for option in OPTIONS
    if option.type is not bool
    for value, accepted in _cases(option)
]


def _form_accepts(name: str, value: object) -> bool:
    data = {"encoder": "default", "loss": "mnrl", name: str(value)}
    form = FineTuneForm(data)
    form.is_valid()
    return name not in form.errors


def _api_accepts(name: str, value: object) -> bool:
    request = TrainingRunRequestSerializer(data={name: value})
    request.is_valid()
    return name not in request.errors


def _command_accepts(flag: str, value: object) -> bool:
    parser = Command().create_parser("manage.py", "sbert_train")
    try:
        parser.parse_args([f"{flag}={value}"])
    except CommandError:
        return False
    return True


@pytest.mark.parametrize(("option", "value", "accepted"), BOUNDED)
def test_the_form_the_api_and_the_command_share_every_bound(option, value, accepted):
    seen = {
        "admin form": _form_accepts(option.name, value),
        "API": _api_accepts(option.name, value),
        "sbert_train": _command_accepts(option.flag, value),
        "Hyperparameters.validate": option.problem(value) is None,
    }
    assert seen == dict.fromkeys(seen, accepted)


def test_a_refused_value_gets_the_same_reason_from_the_command_and_the_run():
    with pytest.raises(CommandError, match=r"warmup_ratio must be in \[0, 1\), got 1\.0"):
        Command().create_parser("manage.py", "sbert_train").parse_args(["--warmup-ratio=1"])
    with pytest.raises(Exception, match=r"warmup_ratio must be in \[0, 1\), got 1\.0"):
        Hyperparameters(warmup_ratio=1.0).validate()


def test_every_surface_offers_every_option():
    assert [name for name in FineTuneForm.base_fields if name != "encoder"] == [
        option.name for option in OPTIONS
    ]
    assert {option.name for option in OPTIONS} <= set(TrainingRunRequestSerializer().fields)
    parser = Command().create_parser("manage.py", "sbert_train")
    flags = {flag for action in parser._actions for flag in action.option_strings}
    assert {option.flag for option in OPTIONS} <= flags
    assert tuple(Hyperparameters().as_dict()) == OPTION_NAMES


def test_the_admin_form_sets_the_seed_and_eval_every():
    assert {"seed", "eval_every"} <= set(FineTuneForm.base_fields)
    form = FineTuneForm(
        {"encoder": "default", "loss": "mnrl", "seed": "7", "eval_every": "5", "patience": ""}
    )
    assert form.is_valid(), form.errors
    hyper = form.hyperparameters()
    assert (hyper.seed, hyper.eval_every, hyper.patience) == (7, 5, 3)  # empty: the default


def test_defaults_are_the_specs():
    hyper = Hyperparameters(loss="cosent")
    for option in OPTIONS:
        if option.default is not None:
            assert getattr(hyper, option.name) == option.default
            assert FineTuneForm.base_fields[option.name].initial == option.default
            field = TrainingRunRequestSerializer().fields[option.name]
            assert field.default == option.default


def test_the_docs_show_the_spec():
    """docs/fine-tuning.md holds ``options_table()`` as it is; the command's section of
    docs/commands.md names every flag, and docs/api.md's run body every key."""
    assert options_table() in (DOCS / "fine-tuning.md").read_text()
    commands = (DOCS / "commands.md").read_text()
    section = commands.partition("## `sbert_train`")[2].partition("\n## ")[0]
    assert all(f"`{option.flag}`" in section for option in OPTIONS)
    api = (DOCS / "api.md").read_text()
    assert all(f'"{option.name}":' in api for option in OPTIONS)
