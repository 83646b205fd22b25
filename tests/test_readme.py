"""The snippets of README and docs/ run as written, the parameter table matches the
config classes, and every public name has an API page.

Every fenced block preceded by ``<!-- snippet: NAME -->`` is extracted and run here,
unchanged (Python with the venv's interpreter, bash with the venv first on PATH, in a
temporary directory), so the docs and the code cannot drift. Every ```python block in
README.md and docs/ must be such a snippet (the design history quotes code; it is not
run). A snippet shown on two pages is the same code on both.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import time

import pytest

from nakflow import AckConfig, NakConfig, RepairConfig
from tests.snippets import FOUND, PAGES, ROOT, SNIPPETS, run_snippet


def test_every_python_block_is_a_tested_snippet() -> None:
    for page, text in PAGES.items():
        blocks = re.findall(r"(<!-- snippet: \S+ -->\n)?```python\n", text)
        assert all(blocks), f"a ```python block in {page} is not a snippet"
    assert {"api.py", "events.py", "aio.py", "cli.sh", "getting-started/job.py",
            "getting-started/receivers.sh", "getting-started/run.sh"} <= set(SNIPPETS)
    for name, page, code in FOUND:  # shown twice: the same code
        assert code == SNIPPETS[name], f"snippet {name} in {page} differs from its twin"


#: fenced blocks that are not snippets show what a command prints (no language, text,
#: json); every other block is a snippet, and every snippet is run (or, for the two
#: commands and the unit file, checked) by a test that names it
OUTPUT = {"", "text", "json"}


def test_every_command_block_is_a_snippet_a_test_runs() -> None:
    block = re.compile(r"(<!-- snippet: \S+ -->\n)?```(\w*)\n", re.S)
    for page, text in PAGES.items():
        for m in block.finditer(text):
            line = text[:m.start()].count("\n") + 1
            assert m.group(1) or m.group(2) in OUTPUT, (
                f"{page}:{line}: a ```{m.group(2)} block that no test runs (make it a snippet)")
    tests = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    unrun = sorted(name for name in SNIPPETS if f'"{name}"' not in tests)
    assert not unrun, f"snippets no test names: {unrun}"


def test_the_two_commands_are_what_make_and_ci_run() -> None:
    """README's two commands: `make demo` runs the main job (its output is
    test_make_demo_output_is_only_nakflow_s's), `make test` is what .ci/run runs."""
    commands = [line.split("#")[0].split() for line in SNIPPETS["two-commands.sh"].splitlines()]
    assert commands == [["make", "demo"], ["make", "test"]]
    makefile = (ROOT / "Makefile").read_text()
    assert "\ndemo: " in makefile and "\ntest: " in makefile
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"


def test_the_systemd_units_command_line_is_one_nakflow_receive_takes() -> None:
    """docs/service.md's unit: its ExecStart parses as `nakflow receive` options (a typo
    would stop the service at its first start), with no --duration or --senders (it runs
    until systemd's KillSignal), and the stop signal is one the service handles."""
    from nakflow.cli import build_parser

    unit = SNIPPETS["orders.service"].replace("\\\n", " ")
    fields = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line)
    argv = shlex.split(fields["ExecStart"])
    assert argv[0].endswith("/bin/nakflow") and argv[1] == "receive"
    args = build_parser().parse_args(argv[1:])
    assert args.duration is None and args.senders is None and args.json
    assert fields["KillSignal"] in ("SIGTERM", "SIGINT")


def test_python_api_snippet_delivers_everything_in_well_under_a_second(tmp_path) -> None:
    t0 = time.monotonic()
    out = run_snippet("api.py", tmp_path, timeout=60)
    elapsed = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "complete", "0"]  # every message sent arrived
    print(f"api.py ran in {elapsed:.2f} s (interpreter start and imports included)")


def test_events_snippet(tmp_path) -> None:
    out = run_snippet("events.py", tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["['ReceiverJoined', 'Confirmed', 'Closed']",
                                       "complete 1"]


def test_asyncio_snippet_ends_by_itself(tmp_path) -> None:
    out = run_snippet("aio.py", tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["0 b'hello'", "1 b'maybe'"]


def test_command_line_snippet(tmp_path) -> None:
    out = run_snippet("cli.sh", tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    report = json.loads((tmp_path / "receiver.json").read_text())
    assert report["delivered"] == 50_000 and report["problems"] == []
    assert "nakflow send: sent 50,000 msgs" in out.stderr


def test_command_line_lines_snippet(tmp_path) -> None:
    out = run_snippet("cli-lines.sh", tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    report = json.loads((tmp_path / "receiver.json").read_text())
    assert report["delivered"] == 2 and report["problems"] == []
    lines = (tmp_path / "lines.jsonl").read_text().splitlines()
    assert [json.loads(line)["payload"] for line in lines] == ["first line", "second line"]


@pytest.mark.parametrize("name", ["curve.sh", "shared-key.sh"])
def test_security_snippets_deliver_everything(tmp_path, name) -> None:
    """docs/security.md's commands as written: keys made, a receiver and a sender that
    use them, every message delivered."""
    out = run_snippet(name, tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "nakflow receive: delivered 1,000 of 1,000 from 1 sender, 0 missing" in out.stderr, (
        out.stderr[-2000:])


@pytest.mark.spark
@pytest.mark.slow
def test_getting_started_spark_job_end_to_end(tmp_path) -> None:
    pytest.importorskip("pyspark")
    (tmp_path / "job.py").write_text(SNIPPETS["getting-started/job.py"])
    out = run_snippet("getting-started/run.sh", tmp_path, timeout=240,
                      prefix=SNIPPETS["getting-started/receivers.sh"])
    # the receivers' lines (ready, or why not) come first, Spark's last: a CI run once
    # ended "0 of 2 receivers answered in 30.0 s" with only Spark's lines shown
    receivers = [ln for ln in out.stderr.splitlines() if ln.startswith("nakflow receive")]
    assert out.returncode == 0, "\n".join(receivers) + "\n...\n" + out.stderr[-3000:]
    verdicts = [line for line in out.stderr.splitlines() if "nakflow receive: delivered" in line]
    assert verdicts == ["nakflow receive: delivered 50 messages (50,000 rows) of 50 from 2 "
                        "senders, 0 messages missing"] * 2, out.stderr[-3000:]


# -- the parameter table -------------------------------------------------------------
CONFIGS = {"NakConfig": NakConfig(), "AckConfig": AckConfig(), "RepairConfig": RepairConfig()}


def _numbers(text: str) -> list[float]:
    """The numbers a table cell shows ("64 MiB" as bytes too)."""
    found = re.findall(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)( MiB)?", text)
    return [float(x.replace(",", "")) * (1 << 20 if mib else 1) for x, mib in found]


def test_the_parameter_table_names_fields_that_exist_with_their_defaults() -> None:
    table = PAGES["docs/concepts.md"]
    rows = re.findall(r"^\| `((?:Nak|Ack|Repair)Config\.[^|]+)` \| ([^|]+) \|", table, re.M)
    assert len(rows) >= 15
    for names, default in rows:
        cls, _, rest = names.partition(".")
        fields = [f.strip(" `") for f in rest.split("/")]
        config = CONFIGS[cls]
        known = {f.name for f in dataclasses.fields(config)}
        for f in fields:
            assert f in known, f"docs/concepts.md names {cls}.{f}, which does not exist"
        values = [getattr(config, f) for f in fields]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            shown = _numbers(default)
            for f, v in zip(fields, values, strict=False):
                assert any(abs(x - v) <= 1e-9 * max(1.0, abs(v)) for x in shown), (
                    f"docs/concepts.md shows {default!r} for {cls}.{f}, the code has {v}")


# -- the API reference ---------------------------------------------------------------
def _resolve(path: str) -> object:
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def _documented() -> set[int]:
    """The objects the API pages' ``::: path`` directives render (ids): each path, and
    for a module every public name in it."""
    import inspect

    out: set[int] = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        for path in re.findall(r"^::: (\S+)$", page.read_text(), re.M):
            obj = _resolve(path)
            out.add(id(obj))
            if inspect.ismodule(obj):
                out.update(id(getattr(obj, n)) for n in getattr(obj, "__all__", dir(obj))
                           if not n.startswith("_"))
    return out


def test_every_public_name_has_an_api_page() -> None:
    """nakflow's ``__all__``, spark_adapter's, and the public modules' names: each is
    rendered by a ``:::`` directive of docs/reference/."""
    import importlib
    import inspect

    import nakflow
    import spark_adapter

    documented = _documented()
    names = [(nakflow, n) for n in nakflow.__all__ if n != "__version__"]
    names += [(spark_adapter, n) for n in spark_adapter.__all__]
    for mod in ("nakflow.events", "nakflow.errors", "nakflow.arrow", "nakflow.testing",
                "nakflow.keyfile", "nakflow.report", "nakflow.policies", "nakflow.aio",
                "nakflow.sender", "nakflow.receiver"):
        module = importlib.import_module(mod)
        names += [(module, n) for n in getattr(module, "__all__", dir(module))
                  if not n.startswith("_") and not inspect.ismodule(getattr(module, n))
                  and getattr(getattr(module, n), "__module__", "nakflow").startswith("nakflow")]
    missing = [f"{m.__name__}.{n}" for m, n in names if id(getattr(m, n)) not in documented]
    assert not missing, f"no API page renders {missing}"
