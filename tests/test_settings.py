"""Settings are declared once; the CLI, the text parser and validation are derived from the declarations."""

from __future__ import annotations

import dataclasses

import pytest

from s2d2.__main__ import build_parser, config_from_args, main
from s2d2.config import DecodeConfig, VerifyConfig, config_from_settings, preset_config, read_settings
from s2d2.sampling import SamplingConfig
from s2d2.settings import BY_NAME, SETTINGS


def test_every_config_field_is_a_declared_setting_with_a_flag():
    declared = {f.name for cls in (DecodeConfig, VerifyConfig, SamplingConfig) for f in dataclasses.fields(cls)}
    assert declared - {"verify", "sampling"} == set(BY_NAME)
    flags = {a.dest for a in build_parser()._subparsers._group_actions[0].choices["generate"]._actions}
    assert set(BY_NAME) <= flags
    assert all(s.label and s.help for s in SETTINGS)


def test_cli_flags_override_the_preset_field_by_field():
    args = build_parser().parse_args(
        ["generate", "--prompt", "x", "--preset", "sdar-b", "--acceptance", "greedy", "--no-cache-ver",
         "--accounting", "official", "--ratio-threshold", "0.5", "--ucb-bins", "3", "2", "1"]
    )  # fmt: skip
    config = config_from_args(args)
    assert config.block_length == 16 and config.verify.c == 0.0  # from the preset
    assert config.verify.acceptance == "greedy" and config.cache_ver is False and config.draft_ver is True
    assert config.accounting == "official" and config.verify.ratio_threshold == 0.5
    assert config.verify.ucb_bins == (3, 2, 1)


def test_flat_settings_leave_derived_fields_to_the_block_length():
    config = config_from_settings(block_length=16, acceptance="greedy", temperature=0.5)
    assert (config.sub_block_length, config.steps) == (16, 16)
    assert config.verify.acceptance == "greedy" and config.sampling.temperature == 0.5
    assert config_from_settings("sdar-a", c=2.0) == preset_config("sdar-a", verify={"c": 2.0})


def test_text_values_parse_by_declared_kind():
    values = read_settings({"block_length": "8", "allow_resample": "false", "ratio_threshold": "none",
                             "threshold": "0.7", "ucb_bins": "2 3 4"})  # fmt: skip
    assert values == {"block_length": 8, "allow_resample": False, "ratio_threshold": None, "threshold": 0.7,
                      "ucb_bins": (2, 3, 4)}  # fmt: skip
    with pytest.raises(ValueError, match="block_length must be int"):
        read_settings({"block_length": "eight"})
    with pytest.raises(ValueError, match="unknown setting 'blocks'"):
        read_settings({"blocks": "8"})


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: DecodeConfig(threshold=float("nan")), "threshold .* NaN"),
        (lambda: VerifyConfig(ratio_tempering=-1.0), "ratio_tempering"),
        (lambda: VerifyConfig(ucb_entropy_source="everything"), "ucb_entropy_source"),
        (lambda: DecodeConfig(accounting="paper"), "accounting"),
        (lambda: DecodeConfig(seed=-1), "seed"),
        (lambda: config_from_settings(lookahead_depth=3), "unknown setting"),
    ],
)
def test_declared_bounds_and_choices_are_enforced(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_cli_prints_the_decoding_order_and_fails_in_one_line(tiny_path, capsys):
    assert main(["generate", "--model", tiny_path, "--prompt", "a b c", "--method", "dynamic", "--block-length",
                 "4", "--max-new-tokens", "8", "--forward-stats", "--accounting", "official"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "decoding order" in out and "block 0:" in out and "commit" in out
    assert main(["generate", "--model", tiny_path, "--prompt", "a", "--block-length", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: block_length") and "\n" not in err


def test_every_entry_point_reads_setting_values_the_same_way():
    """The CLI and lm-eval send text, the dashboard and the API typed values: one coercion reads them all."""
    from components.runner import resolve
    from s2d2.integrations.lm_eval.model import decode_settings

    text = {"cache_ver": "on", "lookahead": "off", "block_length": "8", "acceptance": "greedy", "steps": "none"}
    expected = {"cache_ver": True, "lookahead": False, "block_length": 8, "acceptance": "greedy", "steps": None}
    assert read_settings(text) == expected
    assert decode_settings(text, "model_args") == expected
    dashboard = resolve(given={"cache_ver": True, "lookahead": "off", "block_length": 8.0, "acceptance": "greedy"})
    assert {k: dashboard[k] for k in ("cache_ver", "lookahead", "block_length", "acceptance")} == {
        k: expected[k] for k in ("cache_ver", "lookahead", "block_length", "acceptance")
    }
    for bad, message in (
        ({"acceptance": "greedyish"}, "unknown acceptance 'greedyish'"),
        ({"cache_ver": "maybe"}, "cache_ver must be bool"),
        ({"block_length": 8.5}, "block_length must be an integer"),
    ):
        for read in (read_settings, lambda given: decode_settings(given, "model_args"), lambda g: resolve(given=g)):
            with pytest.raises(ValueError, match=message):
                read(bad)
