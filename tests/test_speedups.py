"""The compiled hot modules (nakflow._speedups) and their pure-Python source agree.

* make setup compiles them: here, with a C compiler and Cython, every one runs compiled;
* a deterministic workload (codec on valid and mangled frames, the tracker, the batcher,
  the inbox, whole core simulations) gives bit-identical results compiled and pure;
* the core modules' own tests pass on the pure Python too (they run compiled in the
  rest of the suite);
* an edited source whose twin is stale runs as pure Python and says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import nakflow.core.seqtrack
from nakflow import _speedups

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE_TESTS = ["tests/test_codec.py", "tests/test_seqtrack.py", "tests/test_rate.py",
              "tests/test_bucket.py", "tests/test_credit.py", "tests/test_fill.py",
              "tests/test_repair.py", "tests/test_batching.py",
              "tests/test_nak_isolation.py", "tests/test_tail_and_eviction.py"]
#: The live process tests again on pure Python (half a minute more): NAKFLOW_PURE_ALL=1.
if os.environ.get("NAKFLOW_PURE_ALL") == "1":
    CORE_TESTS.append("tests/test_hostile.py")
can_build = shutil.which("cc") is not None and importlib.util.find_spec("Cython") is not None


def run(env_pure: bool, *args: str, timeout: float = 250) -> subprocess.CompletedProcess[str]:
    """``timeout`` stays below pytest-timeout's 300 s guard, so that a child that hangs is
    stopped here, with its output shown: the guard stopped this process first, and the
    output of a child pytest that hung in one CI run was lost with it (2026-12-07)."""
    # a pytest of its own, serial: not one of this run's xdist workers (their variables
    # would make it take the conftest's machine lock as a worker of another run)
    env = {k: v for k, v in os.environ.items()
           if k != _speedups.ENV and not k.startswith("PYTEST_XDIST")}
    if env_pure:
        env[_speedups.ENV] = "1"
    try:
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # its output is bytes, whatever text= said
        out = b"".join(x if isinstance(x, bytes) else (x or "").encode()
                       for x in (exc.stdout, exc.stderr))
        pytest.fail(f"{' '.join(args)} ran past {timeout} s; its output:\n"
                    f"{out.decode(errors='replace')[-6000:]}")


@pytest.mark.skipif(not can_build, reason="no C compiler or no Cython: pure Python only")
def test_setup_compiled_every_hot_module():
    assert set(_speedups.status().values()) == {"compiled"}, _speedups.status()
    on_data = nakflow.core.seqtrack.SequenceTracker.on_data
    assert type(on_data).__name__ == "cython_function_or_method"
    assert nakflow.core.seqtrack.SequenceTracker.__module__ == "nakflow.core.seqtrack"  # pickles


def test_a_mode_registered_is_the_one_the_public_tables_show_and_the_cores_build():
    """``register`` replaces a mode's pair in the tables ``nakflow.policies`` shows, and
    ``make_sender_flow`` / ``make_receiver_flow`` build from the same tables, compiled or
    not. The tables lived in ``policy.registry``, whose compiled twin ran the module's
    body again and held tables of its own: ``register`` changed the twin's, and
    ``nakflow.policies.SENDER_POLICIES`` still showed the old factory (an assignment to
    it changed nothing at all)."""
    from nakflow import policies
    from nakflow.policy import registry

    old_s, old_r = policies.SENDER_POLICIES["none"], policies.RECEIVER_POLICIES["none"]
    built: list[str] = []

    def sender(**kw: object) -> object:
        built.append("sender")
        return old_s(**kw)

    def receiver(**kw: object) -> object:
        built.append("receiver")
        return old_r(**kw)

    policies.register("none", sender, receiver)
    try:
        assert policies.SENDER_POLICIES["none"] is sender
        assert registry.RECEIVER_POLICIES["none"] is receiver
        policies.make_sender_flow("none", stream="s", sender="a", epoch=1)
        policies.make_receiver_flow("none", stream="s", receiver="r", capacity_msgs=10)
        assert built == ["sender", "receiver"]
    finally:
        policies.register("none", old_s, old_r)
    assert policies.SENDER_POLICIES["none"] is old_s


def test_compiled_and_pure_give_identical_results():
    outs = {}
    for pure in (False, True):
        r = run(pure, "tests/speedups_workload.py")
        assert r.returncode == 0, r.stderr[-3000:]
        modes, digests = (json.loads(line) for line in r.stdout.splitlines()[:2])
        want = "pure" if pure else ("compiled" if can_build else "pure")
        assert {m.split(" ")[0] for m in modes.values()} == {want}, modes
        outs[pure] = digests
    differ = [k for k in outs[False] if outs[False][k] != outs[True][k]]
    assert not differ, f"compiled and pure Python disagree on {differ}"


@pytest.mark.slow
def test_core_tests_pass_on_pure_python():
    """The core's tests on pure Python, those that share the machine (this test does)."""
    r = run(True, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not quiet",
            *CORE_TESTS)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.quiet
def test_quiet_core_tests_pass_on_pure_python():
    """... and those marked quiet (receivers held up for moments, whose flow control is
    judged against the CPU they get), alone as this test is: run beside the other
    workers' tests, they measured a loaded machine instead."""
    r = run(True, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "quiet", *CORE_TESTS)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1]


def test_a_stale_twin_is_not_used(tmp_path):
    """A hot module edited after its twin was built runs as pure Python (a copy of the
    package, so the tree under test is not touched)."""
    if _speedups.status()["core.gaps"] != "compiled":
        pytest.skip("no compiled modules here")
    pkg = tmp_path / "nakflow"
    shutil.copytree(ROOT / "nakflow", pkg)
    with open(pkg / "core" / "gaps.py", "a") as f:
        f.write("\n# an edit after the build\n")
    env = {k: v for k, v in os.environ.items() if k != _speedups.ENV}
    env["PYTHONPATH"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import json, nakflow._speedups as s; "
                        "print(json.dumps(s.status()))"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    modes = json.loads(r.stdout)
    assert modes["core.gaps"].startswith("pure (stale"), modes
    assert modes["wire.codec"] == "compiled"
    assert "older than its source" in r.stderr


@pytest.mark.skipif(not can_build, reason="no C compiler or no Cython: pure Python only")
def test_nakflow_speedups_compiles_where_nakflow_is_imported_from(tmp_path):
    """``nakflow speedups`` builds next to the nakflow its Python imports, not into a
    checkout: a copy installed by ``pip install`` stayed pure Python, and its status said
    to run a script the installed copy does not have. Here a copy of the package, one
    module edited since its twin was built: the command compiles that one, a fresh
    interpreter runs all compiled; ``--clean`` leaves them all pure and ``--check`` says
    so (exit 1), naming the command that builds them."""
    if _speedups.status()["core.gaps"] != "compiled":
        pytest.skip("no compiled modules here")
    pkg = tmp_path / "nakflow"
    shutil.copytree(ROOT / "nakflow", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "core" / "gaps.py", "a") as f:
        f.write("\n# an edit after the build\n")
    # the twin of a module that left HOT (the sender's core did, 2026-12-07)
    (twin,) = (pkg / "core").glob("seqtrack_c.*.so")
    orphan = twin.with_name(twin.name.replace("seqtrack_c", "sender_core_c"))
    shutil.copy2(twin, orphan)
    env = {k: v for k, v in os.environ.items() if k != _speedups.ENV}
    env["PYTHONPATH"] = str(tmp_path)

    def speedups(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nakflow", "speedups", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=250)

    built = speedups()
    assert built.returncode == 0, built.stdout + built.stderr
    assert f"[speedups] compiling 1 modules with Cython into {pkg} ..." in built.stdout
    assert (f"[speedups] removed {orphan.name}: its module is no longer compiled"
            in built.stdout) and not orphan.exists()
    n = len(_speedups.HOT)
    assert f"[speedups] {n} of {n} hot modules run compiled ({pkg})" in built.stdout
    assert len(list((pkg / "core").glob("gaps_c.*.so"))) == 1
    assert (ROOT / "nakflow" / "core" / "gaps.py").read_text() != (
        pkg / "core" / "gaps.py").read_text()  # the checkout's twin was not touched
    assert _speedups.status()["core.gaps"] == "compiled"

    gone = speedups("--clean")
    assert gone.returncode == 0 and f"removed {n} compiled modules" in gone.stdout, gone.stdout
    check = speedups("--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "[speedups] core.gaps: pure (not compiled: run 'nakflow speedups')" in check.stdout
    assert f"0 of {n} hot modules run compiled ({pkg})" in check.stdout
    both = speedups("--check", "--clean")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr
