"""README's snippets run as written, and its parameter table matches the config classes.

Every fenced block preceded by ``<!-- snippet: NAME -->`` is extracted and run here,
unchanged (Python with the venv's interpreter, bash with the venv first on PATH, in a
temporary directory), so README and code cannot drift. Every ```python block must be
such a snippet.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from nakflow import AckConfig, NakConfig, RepairConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SNIPPET = re.compile(r"<!-- snippet: (\S+) -->\n```(\w+)\n(.*?)\n```", re.S)
SNIPPETS = {name: code for name, _lang, code in SNIPPET.findall(README)}


def run(args: list[str], cwd: pathlib.Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_every_python_block_is_a_tested_snippet() -> None:
    blocks = re.findall(r"(<!-- snippet: \S+ -->\n)?```python\n", README)
    assert blocks and all(blocks), "a ```python block in README.md is not a snippet"
    assert {"api.py", "aio.py", "cli.sh", "getting-started/job.py"} <= set(SNIPPETS)


def test_python_api_snippet_delivers_everything_in_well_under_a_second(tmp_path) -> None:
    (tmp_path / "api.py").write_text(SNIPPETS["api.py"])
    t0 = time.monotonic()
    out = run([sys.executable, "api.py"], tmp_path, timeout=60)
    elapsed = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "complete", "0"]  # every message sent arrived
    print(f"api.py ran in {elapsed:.2f} s (interpreter start and imports included)")


def test_events_snippet(tmp_path) -> None:
    (tmp_path / "events.py").write_text(SNIPPETS["events.py"])
    out = run([sys.executable, "events.py"], tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["['ReceiverJoined', 'Confirmed', 'Closed']",
                                       "complete 1"]


def test_asyncio_snippet_ends_by_itself(tmp_path) -> None:
    (tmp_path / "aio.py").write_text(SNIPPETS["aio.py"])
    out = run([sys.executable, "aio.py"], tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["0 b'hello'", "1 b'maybe'"]


def test_command_line_snippet(tmp_path) -> None:
    out = run(["bash", "-ec", SNIPPETS["cli.sh"]], tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    report = json.loads((tmp_path / "receiver.json").read_text())
    assert report["delivered"] == 50_000 and report["problems"] == []
    assert "nakflow send: sent 50,000 msgs" in out.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_getting_started_spark_job_end_to_end(tmp_path) -> None:
    pytest.importorskip("pyspark")
    (tmp_path / "job.py").write_text(SNIPPETS["getting-started/job.py"])
    script = SNIPPETS["getting-started/receivers.sh"] + "\n" + SNIPPETS["getting-started/run.sh"]
    out = run(["bash", "-ec", script], tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    verdicts = [line for line in out.stderr.splitlines() if "nakflow receive: delivered" in line]
    assert verdicts == ["nakflow receive: delivered 50 messages (50,000 rows) of 50 from 2 "
                        "senders, 0 messages missing"] * 2, out.stderr[-3000:]


# -- the parameter table -------------------------------------------------------------
CONFIGS = {"NakConfig": NakConfig(), "AckConfig": AckConfig(), "RepairConfig": RepairConfig()}


def _numbers(text: str) -> list[float]:
    """The numbers a table cell shows ("64 MiB" as bytes too)."""
    found = re.findall(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)( MiB)?", text)
    return [float(x.replace(",", "")) * (1 << 20 if mib else 1) for x, mib in found]


def test_readme_parameter_table_names_fields_that_exist_with_their_defaults() -> None:
    rows = re.findall(r"^\| `((?:Nak|Ack|Repair)Config\.[^|]+)` \| ([^|]+) \|", README, re.M)
    assert len(rows) >= 15
    for names, default in rows:
        cls, _, rest = names.partition(".")
        fields = [f.strip(" `") for f in rest.split("/")]
        config = CONFIGS[cls]
        known = {f.name for f in dataclasses.fields(config)}
        for f in fields:
            assert f in known, f"README names {cls}.{f}, which does not exist"
        values = [getattr(config, f) for f in fields]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            shown = _numbers(default)
            for f, v in zip(fields, values, strict=False):
                assert any(abs(x - v) <= 1e-9 * max(1.0, abs(v)) for x in shown), (
                    f"README shows {default!r} for {cls}.{f}, the code has {v}")
