"""Compile nakflow's hot modules with Cython into twin extension modules.

    .venv/bin/python scripts/build_speedups.py [--clean]

Each module in ``nakflow._speedups.HOT`` is copied, unchanged but for a stamp of its
source's SHA-256, to a scratch package as ``<name>_c.py``, compiled (Cython, then the C
compiler), and the resulting ``<name>_c*.so`` is put next to its source. A twin
already built from the current source is kept. ``--clean`` removes every twin.
Exit status 1 (and the compiler's words) when a build fails: nakflow then runs the pure
Python, which is the same code.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.machinery
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "nakflow"
sys.path.insert(0, str(ROOT))
# the twins are imported only to read their stamps: the package itself runs pure here
# (else a stale twin warns about itself while it is being rebuilt)
os.environ["NAKFLOW_PURE_PYTHON"] = "1"

from nakflow._speedups import HOT, TWIN_SUFFIX, source_sha256  # noqa: E402

STAMP = "\n_SOURCE_SHA256 = {!r}  # stamped by scripts/build_speedups.py\n"


def source(name: str) -> pathlib.Path:
    """The source of hot module ``name`` (``core.gaps``: ``nakflow/core/gaps.py``)."""
    return PKG / f"{name.replace('.', '/')}.py"


def twins(name: str, pkg: pathlib.Path = PKG) -> list[str]:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", action="store_true", help="remove the compiled twins")
    args = ap.parse_args()
    if args.clean:
        for name in HOT:
            for p in twins(name):
                os.remove(p)
        print("[speedups] removed the compiled modules", flush=True)
        return 0
    todo = []
    for name in HOT:
        sha = source_sha256(str(source(name)))
        if stamped(name) != sha:
            todo.append((name, sha))
    if not todo:
        print(f"[speedups] {len(HOT)} compiled modules are current", flush=True)
        return 0
    t0 = time.monotonic()
    print(f"[speedups] compiling {len(todo)} modules with Cython ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="nakflow-speedups-") as tmp:
        pkg = pathlib.Path(tmp) / "nakflow"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        sources = []
        for name, sha in todo:
            src = pkg / f"{name.replace('.', '/')}{TWIN_SUFFIX}.py"
            src.parent.mkdir(parents=True, exist_ok=True)
            (src.parent / "__init__.py").write_text("")
            src.write_text(source(name).read_text() + STAMP.format(sha))
            sources.append(str(src))
        cmd = [sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-3", "-q",
               "-j", str(min(4, os.cpu_count() or 1)), "-X", "annotation_typing=False",
               *sources]
        # -O2 -g0 (after Python's own -g -O3, so they win): the build takes half the time
        # (about 30 s instead of 55 s for the 17 modules here, and every fresh clone's
        # `make test` builds them) and the twins run as fast (benchmarks/suite.py W1)
        env = {**os.environ, "CFLAGS": os.environ.get("CFLAGS", "") + " -O2 -g0"}
        run = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
            print("[speedups] the build failed: nakflow runs as pure Python", flush=True)
            return 1
        for name, _ in todo:
            for old in twins(name):
                os.remove(old)
            built = twins(name, pkg)
            if not built:
                print(f"[speedups] {name}: no module was built", flush=True)
                return 1
            shutil.copy2(built[0], source(name).parent / pathlib.Path(built[0]).name)
    print(f"[speedups] compiled {len(todo)} modules in {time.monotonic() - t0:.0f} s",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
