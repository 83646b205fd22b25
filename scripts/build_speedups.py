"""Compile nakflow's hot modules with Cython into twin extension modules, in this checkout.

    .venv/bin/python scripts/build_speedups.py [--clean]

What ``make setup`` and ``make speedups`` run: ``nakflow speedups`` (``nakflow/cli/speedups.py``,
which says how) on this checkout's package, whatever nakflow the Python would import
otherwise. Exit status 1 (and the compiler's words) when a build fails: nakflow then runs
the pure Python, which is the same code.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the twins are imported only to read their stamps: the package itself runs pure here
# (else a stale twin warns about itself while it is being rebuilt)
os.environ["NAKFLOW_PURE_PYTHON"] = "1"

from nakflow.cli.speedups import build, clean  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", action="store_true", help="remove the compiled twins")
    args = ap.parse_args()
    pkg = ROOT / "nakflow"
    if args.clean:
        clean(pkg)
        print("[speedups] removed the compiled modules", flush=True)
        return 0
    return 0 if build(pkg, lambda line: print(line, flush=True)) else 1


if __name__ == "__main__":
    sys.exit(main())
