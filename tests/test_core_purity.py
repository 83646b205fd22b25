"""The sans-I/O core imports no sockets, threads, clocks, ZeroMQ or Spark."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The sans-I/O layers (every module in them) and the top modules they rest on.
LAYERS = [p for layer in ("wire", "policy", "core")
          for p in (ROOT / "nakflow" / layer).glob("*.py")]
CORE = [*sorted(str(p.relative_to(ROOT / "nakflow"))[:-3] for p in LAYERS),
        "config", "errors", "events", "report"]
FORBIDDEN = {"zmq", "pyspark", "threading", "socket", "time", "asyncio", "select",
             "random", "transports", "simulations", "spark_adapter"}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.add(node.module.split(".")[0])
    return mods


@pytest.mark.parametrize("name", CORE)
def test_core_module_imports_no_io(name):
    assert not imported_modules(ROOT / "nakflow" / f"{name}.py") & FORBIDDEN


@pytest.mark.parametrize("name", ["aio", "live/async_sender", "live/async_receiver",
                                  "live/async_common"])
def test_the_asyncio_drivers_do_not_import_the_threaded_ones(name):
    path = ROOT / "nakflow" / f"{name}.py"
    assert not imported_modules(path) & {"threading"}
    tree = ast.parse(path.read_text())
    relative = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level}
    assert not relative & {"sender", "receiver"}, relative


def test_nakflow_never_imports_the_adapters():
    for path in (ROOT / "nakflow").rglob("*.py"):
        bad = imported_modules(path) & {"simulations", "spark_adapter"}
        assert not bad, f"{path.name} imports {bad}"
