"""``nakflow speedups``: compile the hot modules' twins (``nakflow._speedups``) next to the
nakflow this Python imports, wherever it is: a checkout (``make setup`` runs it, through
``scripts/build_speedups.py``) or an installed copy (``pip install``, a cluster's nodes).

Before it, only the checkout's script built them, into the checkout: a copy installed
with ``pip install PATH[speedups]`` stayed pure Python, and the status said to run a
script the installed copy has not. What they save is modest on Python 3.11 (the receiver
ran 12 % fewer instructions a message than pure Python, the sender as many;
docs/benchmarks.md, "The compiled hot path").

Each module in ``HOT`` is copied, unchanged but for a stamp of its source's SHA-256, to a
scratch package as ``<name>_c.py``, compiled (Cython, then the C compiler), and the
resulting ``<name>_c*.so`` is put next to its source. A twin already built from the
current source is kept. Afterwards a fresh interpreter says which modules run compiled.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from .._speedups import ENV, HOT, TWIN_SUFFIX, source_sha256

__all__ = ["build", "clean", "register", "status_of"]

STAMP = "\n_SOURCE_SHA256 = {!r}  # stamped by nakflow speedups\n"
EXAMPLES = """examples:
  nakflow speedups           compile what is not compiled yet (Cython and a C compiler)
  nakflow speedups --check   say which modules run compiled, build nothing
  nakflow speedups --clean   remove the compiled modules: pure Python from then on

exit status: 0 every hot module runs compiled (--clean: removed); 1 some do not (no
Cython or C compiler, a build that failed: the words say which; nakflow then runs them
as pure Python, the same code); 2 bad arguments, or the package's directory cannot be
written (install it where you can write, or run as its owner). See docs/exit-codes.md."""
NEEDS = ("needs Cython (pip install 'nakflow[speedups]') and a C compiler with Python's "
         "headers (Debian: apt-get install build-essential python3-dev)")


def package_dir() -> pathlib.Path:
    """The directory of the nakflow this Python imports."""
    import nakflow

    return pathlib.Path(nakflow.__file__).resolve().parent


def source(pkg: pathlib.Path, name: str) -> pathlib.Path:
    """The source of hot module ``name`` (``core.gaps``: ``<pkg>/core/gaps.py``)."""
    return pkg / f"{name.replace('.', '/')}.py"


def twins(pkg: pathlib.Path, name: str) -> list[str]:
    stem = name.replace(".", "/")
    return [p for suffix in importlib.machinery.EXTENSION_SUFFIXES
            for p in glob.glob(str(pkg / f"{stem}{TWIN_SUFFIX}{suffix}"))]


def stamped(name: str) -> str | None:
    """The source SHA-256 the twin of ``name`` was built from (None: none imports)."""
    try:
        twin = importlib.import_module(f"nakflow.{name}{TWIN_SUFFIX}")
    except ImportError:
        return None
    return getattr(twin, "_SOURCE_SHA256", None)


def status_of(pkg: pathlib.Path) -> dict[str, str]:
    """``nakflow._speedups.status()`` as a fresh interpreter importing ``pkg`` sees it
    (this process may run twins that were replaced since it started)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        x for x in (str(pkg.parent), os.environ.get("PYTHONPATH")) if x)
    run = subprocess.run([sys.executable, "-c", "import json, nakflow._speedups as s; "
                          "print(json.dumps(s.status()))"], cwd=pkg.parent, env=env,
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"nakflow does not import from {pkg}: {run.stderr[-2000:]}")
    out: dict[str, str] = json.loads(run.stdout.splitlines()[-1])
    return out


def built(pkg: pathlib.Path) -> list[pathlib.Path]:
    """Every twin in ``pkg``, of a module in ``HOT`` or not."""
    return [p for p in pkg.rglob(f"*{TWIN_SUFFIX}.*") if p.suffix in (".so", ".pyd")]


def clean(pkg: pathlib.Path) -> int:
    """Remove every twin; how many files went."""
    twins_there = built(pkg)
    for p in twins_there:
        p.unlink()
    return len(twins_there)


def orphans(pkg: pathlib.Path) -> list[pathlib.Path]:
    """Twins of modules no longer in ``HOT`` (built before a module left it): never
    imported, only in the way."""
    hot = {name.replace(".", "/") for name in HOT}
    return [p for p in built(pkg)
            if str(p.relative_to(pkg)).split(f"{TWIN_SUFFIX}.")[0] not in hot]


def build(pkg: pathlib.Path, say: Callable[[str], object] = print) -> bool:
    """Compile the twins whose source changed (or that are missing) into ``pkg``; False
    if Cython is missing or the build failed (what it said goes to stderr)."""
    for old in orphans(pkg):
        old.unlink()
        say(f"[speedups] removed {old.name}: its module is no longer compiled")
    todo = [(name, sha) for name in HOT
            if stamped(name) != (sha := source_sha256(str(source(pkg, name))))]
    if not todo:
        say(f"[speedups] {len(HOT)} compiled modules are current")
        return True
    if importlib.util.find_spec("Cython") is None:
        say(f"[speedups] {len(todo)} modules are not compiled: the build {NEEDS}")
        return False
    t0 = time.monotonic()
    say(f"[speedups] compiling {len(todo)} modules with Cython into {pkg} ...")
    with tempfile.TemporaryDirectory(prefix="nakflow-speedups-") as tmp:
        scratch = pathlib.Path(tmp) / "nakflow"
        scratch.mkdir()
        (scratch / "__init__.py").write_text("")
        sources = []
        for name, sha in todo:
            src = scratch / f"{name.replace('.', '/')}{TWIN_SUFFIX}.py"
            src.parent.mkdir(parents=True, exist_ok=True)
            (src.parent / "__init__.py").write_text("")
            src.write_text(source(pkg, name).read_text() + STAMP.format(sha))
            sources.append(str(src))
        cmd = [sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-3", "-q",
               "-j", str(min(4, os.cpu_count() or 1)), "-X", "annotation_typing=False",
               *sources]
        # -O2 -g0 (after Python's own -g -O3, so they win): the build takes half the time
        # (about 30 s instead of 55 s for the 17 modules here, and every fresh clone's
        # `make test` builds them) and the twins ran as fast (benchmarks/suite.py W1)
        env = {**os.environ, "CFLAGS": os.environ.get("CFLAGS", "") + " -O2 -g0"}
        run = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
            say(f"[speedups] the build failed (it {NEEDS}): nakflow runs as pure Python")
            return False
        for name, _ in todo:
            built = twins(scratch, name)
            if not built:
                say(f"[speedups] {name}: no module was built")
                return False
            for stale in twins(pkg, name):
                os.remove(stale)
            shutil.copy2(built[0], source(pkg, name).parent / pathlib.Path(built[0]).name)
    say(f"[speedups] compiled {len(todo)} modules in {time.monotonic() - t0:.0f} s")
    return True


def cmd_speedups(args: argparse.Namespace) -> int:
    pkg = package_dir()
    if args.clean:
        print(f"[speedups] removed {clean(pkg)} compiled modules from {pkg}: pure Python")
        return 0
    if not args.check and not os.access(pkg, os.W_OK):
        raise ValueError(f"{pkg} cannot be written by this user: install nakflow where you "
                         "can write (a virtualenv), or run this as its owner")
    if not args.check:
        build(pkg)
    modes = status_of(pkg)
    pure = {k: v for k, v in modes.items() if v != "compiled"}
    for name, why in sorted(pure.items()):
        print(f"[speedups] {name}: {why}")
    print(f"[speedups] {len(modes) - len(pure)} of {len(modes)} hot modules run compiled "
          f"({pkg})")
    return 1 if pure else 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("speedups", epilog=EXAMPLES,
                       description="Compile nakflow's hot modules with Cython next to the "
                                   "nakflow this Python imports\n(an installed copy too), "
                                   "then say which run compiled.",
                       help="compile the hot modules with Cython where nakflow is installed "
                            "(a receiver runs about 12 %% fewer instructions a message)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true",
                      help="say which hot modules run compiled; build nothing")
    what.add_argument("--clean", action="store_true",
                      help="remove the compiled modules (nakflow then runs as pure Python)")
    p.set_defaults(func=cmd_speedups)
