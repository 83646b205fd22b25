"""Every command's help explains every option and shows its default; the top-level
help is plain text (no reStructuredText markup)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from nakflow.cli import build_parser

PARSER = build_parser()
COMMANDS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_all_commands_are_registered() -> None:  # the plugins' commands too
    assert {"send", "receive", "keygen", "demo", "eval", "simulate"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help_and_shows_its_default(name: str) -> None:
    p = COMMANDS[name]
    text = p.format_help()
    for action in p._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        assert action.help, f"nakflow {name} {label}: no help text"
        if action.option_strings and not (action.default is None or action.default is False
                                          or action.default in ([], argparse.SUPPRESS)):
            helptext = p._get_formatter()._get_help_string(action)
            assert "default" in helptext, f"nakflow {name} {label}: default not shown"
    assert "``" not in text


def test_top_level_help_is_plain_text() -> None:
    out = subprocess.run([sys.executable, "-m", "nakflow.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "``" not in out and ":class:" not in out
    assert "nakflow COMMAND --help" in out
    for name in ("send", "receive", "demo", "eval", "simulate"):
        assert name in out


def test_the_nak_options_say_the_library_defaults_and_0_turns_the_probe_off() -> None:
    from nakflow import NakConfig
    from nakflow.cli.commands import nak_config

    d = NakConfig()
    text = " ".join(COMMANDS["send"].format_help().split())
    assert f"default {d.probe_after_s}; 0: no probe" in text
    ends = ["send", "--data", "tcp://127.0.0.1:1", "--feedback", "tcp://127.0.0.1:2"]
    assert nak_config(PARSER.parse_args([*ends, "--nak-probe-after", "0"])).probe_after_s is None
    assert nak_config(PARSER.parse_args([*ends, "--nak-probe-after", "0.3"])).probe_after_s == 0.3
    assert nak_config(PARSER.parse_args(ends)) == d
