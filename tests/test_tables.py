"""The printed tables read back: what format_table prints, parse_table returns."""

from __future__ import annotations

import pytest

from nakflow.tables import format_table, parse_table

ROWS = [{"mode": "nak", "receiver": "slow", "goodput": 9_800},
        {"mode": "ack", "receiver": "slow", "goodput": 10_100}]


def test_a_table_reads_back_with_its_legend_and_output_around_it() -> None:
    text = "scenario x, one row per mode\n" + format_table(ROWS) + "\nwrote results/\n"
    assert parse_table(text) == [{k: str(v) for k, v in r.items()} for r in ROWS]
    assert parse_table(format_table(ROWS, legend=False)) == parse_table(text)


def test_text_without_a_table_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no table in the text"):
        parse_table("nakflow receive: delivered 10 of 10\n")
