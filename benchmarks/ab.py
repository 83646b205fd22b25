"""One change against another in W8, interleaved: is it faster, or is it the noise?

    .venv/bin/python benchmarks/ab.py (--base REF_OR_DIR | --aa) [--head DIR] [--rounds 20]
        [--count 200000] [--size 1000] [--ack] [--json PATH] [--allow-pure] [--keep]

Runs ``benchmarks/suite.py``'s W8 (one nakflow sender to four receiver processes that
consume as fast as they can, mode nak) from two checkouts in turn, round after round,
the order rotating: HEAD (default: this checkout) and BASE (a directory, or a git ref of
HEAD's repository checked out into a temporary worktree, its hot modules compiled, the
worktree removed at the end). ``--ack`` adds a third arm, HEAD in mode ack, the
reference W8's target is stated against. Each round prints every arm's delivered rate
(the slowest receiver's), how its start ended and its cuts; the summary gives the median
of the rounds' HEAD/BASE ratios with a 95 % bootstrap interval over the rounds, the mean,
and per arm the median rate, the runs with at most one cut and the messages missing.

Two runs of the same code differ by several percent on a busy machine. ``--aa`` runs HEAD
against itself and measures that floor: an interval that holds 1.0 is no evidence
either way.

Each arm's processes run with the arm's directory as their working directory and on
``PYTHONPATH``: ``python -m nakflow`` imports from the working directory first, so a
``PYTHONPATH`` alone, from inside another checkout, runs that checkout's code in both
arms. Before the first round each arm is asked which ``nakflow`` it imports and whether
its hot modules are compiled; a mismatch stops the run (``--allow-pure``: compiled
modules may differ, e.g. a BASE from before ``scripts/build_speedups.py``).

The exit status is 1 if any run left a message missing at any receiver, 2 on a setup
error (BASE not found, an arm that imports another checkout's code).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks.suite import w8_run  # noqa: E402

#: What each arm is asked before the first round: which nakflow it imports, which hot
#: modules run pure Python, and where every nakflow module it loaded came from (an
#: editable install's finder fills in, from its own checkout, what the arm lacks).
PROBE = ("import json, sys, nakflow, nakflow._speedups as s; pure = sorted(k for k, v in "
         "s.status().items() if v != 'compiled'); print(json.dumps({'file': nakflow.__file__, "
         "'pure': pure, 'files': sorted({getattr(m, '__file__', None) or '' for n, m in "
         "list(sys.modules.items()) if n == 'nakflow' or n.startswith('nakflow.')})}))")


class SetupError(Exception):
    """BASE or HEAD cannot be run as asked."""


def arm_env(path: str) -> dict[str, str]:
    """The environment an arm's processes run in: its checkout first on the path."""
    return {**os.environ, "PYTHONPATH": path}


def arm_info(path: str) -> dict[str, Any]:
    """What a process started as the arm's processes are imports: ``nakflow`` itself
    (``file``), every nakflow module it loaded (``files``), and the hot modules it runs as
    pure Python (``pure``)."""
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=path, env=arm_env(path),
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SetupError(f"{path}: cannot import nakflow there:\n{proc.stderr[-2000:]}")
    info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return info


def check_arm(name: str, path: str, *, allow_pure: bool) -> dict[str, Any]:
    """``arm_info``, refused if it imports another checkout's nakflow, or (unless
    ``allow_pure``) runs any hot module as pure Python."""
    info = arm_info(path)
    own = os.path.realpath(path) + os.sep
    alien = sorted({os.path.realpath(f) for f in [info["file"], *info["files"]]
                    if f and not os.path.realpath(f).startswith(own)})
    if alien:
        raise SetupError(f"{name} ({path}) imports nakflow modules from outside its checkout: "
                         + ", ".join(alien[:5]))
    if info["pure"] and not allow_pure:
        raise SetupError(f"{name} ({path}) runs {', '.join(info['pure'])} as pure Python "
                         "(compile: scripts/build_speedups.py there; or --allow-pure)")
    return info


def worktree(ref: str, into: str) -> str:
    """Check ``ref`` of this repository out into ``into`` and compile its hot modules."""
    proc = subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", into, ref],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"--base {ref}: neither a directory nor a git ref here:\n"
                         f"{proc.stderr.strip()}")
    build = os.path.join(into, "scripts", "build_speedups.py")
    if os.path.exists(build):
        print(f"[ab] compiling {ref}'s hot modules in {into} ...", flush=True)
        subprocess.run([sys.executable, build], cwd=into, env=arm_env(into), check=False)
    return into


def run_arm(path: str, mode: str, count: int, size: int) -> dict[str, Any]:
    """One W8 run of the checkout at ``path`` in ``mode``: its row, with ``rate`` (the
    slowest receiver's delivered rate) and ``mid``."""
    here, before = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(path)  # the processes it starts inherit both (see the module's doc)
    os.environ["PYTHONPATH"] = path
    try:
        rate, mid, row = w8_run(mode, count, size)
    finally:
        os.chdir(here)
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    return {**row, "rate": rate, "mid": mid}


#: Fewer rounds than this give no interval: a resampled median of a few is no estimate.
MIN_ROUNDS_CI = 8


def bootstrap(ratios: Sequence[float], *, n: int = 2000,
              seed: int = 1) -> tuple[float, float] | None:
    """A 95 % interval of the median of ``ratios`` (resampled with replacement); None
    from fewer than MIN_ROUNDS_CI."""
    a = np.asarray(ratios, dtype=float)
    if len(a) < MIN_ROUNDS_CI:
        return None
    rng = np.random.default_rng(seed)
    meds = np.median(a[rng.integers(0, len(a), size=(n, len(a)))], axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def summary(rounds: list[dict[str, dict[str, Any]]], arms: Sequence[str]) -> dict[str, Any]:
    """The figures the run ends with (see the module's doc)."""
    out: dict[str, Any] = {"rounds": len(rounds), "arms": {}}
    for arm in arms:
        rows = [r[arm] for r in rounds]
        ends: dict[str, int] = {}
        for row in rows:  # "unfilled 0.09s": how it ended, then when
            end = (row["start"] or "-").split()[0]
            ends[end] = ends.get(end, 0) + 1
        out["arms"][arm] = {
            "median_rate": round(statistics.median(row["rate"] for row in rows)),
            "at_most_one_cut": sum(row["cuts"] <= 1 for row in rows),
            "median_p99_ms": round(statistics.median(row.get("p99_ms", 0.0) for row in rows), 1),
            "missing": sum(row["missing"] for row in rows), "starts": ends}
    ratios = [r["head"]["rate"] / r["base"]["rate"] for r in rounds]
    ci = bootstrap(ratios)
    out["head_over_base"] = {"median": round(statistics.median(ratios), 4),
                             "ci95": None if ci is None else [round(ci[0], 4), round(ci[1], 4)],
                             "mean": round(statistics.mean(ratios), 4)}
    if "ack" in arms:
        for arm in ("head", "base"):
            over = [r[arm]["rate"] / r["ack"]["rate"] for r in rounds]
            out[f"{arm}_over_ack"] = {"median": round(statistics.median(over), 4),
                                      "mean": round(statistics.mean(over), 4)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--base", help="a checkout's directory, or a git ref of HEAD's repository")
    which.add_argument("--aa", action="store_true", help="HEAD against itself: the noise")
    ap.add_argument("--head", default=ROOT, help="a checkout's directory (default: this one)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--ack", action="store_true", help="add HEAD in mode ack as a third arm")
    ap.add_argument("--json", metavar="PATH", help="write every row and the summary here")
    ap.add_argument("--allow-pure", action="store_true",
                    help="run arms whose hot modules are not all compiled")
    ap.add_argument("--keep", action="store_true", help="keep BASE's temporary worktree")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.count < 1 or args.size < 1:
        ap.error("--rounds, --count and --size must be at least 1")
    scratch = None
    try:
        head = os.path.realpath(args.head)
        if args.aa:
            base = head
        elif os.path.isdir(args.base):
            base = os.path.realpath(args.base)
        else:
            scratch = tempfile.mkdtemp(prefix="nakflow-ab-")
            base = worktree(args.base, os.path.join(scratch, "base"))
        for name, path in (("HEAD", head), ("BASE", base)):
            info = check_arm(name, path, allow_pure=args.allow_pure)
            print(f"[ab] {name}: {os.path.dirname(info['file'])}"
                  + (f" (pure Python: {', '.join(info['pure'])})" if info["pure"] else ""),
                  flush=True)
        return compare(args, head, base)
    except SetupError as e:
        print(f"[ab] {e}", file=sys.stderr)
        return 2
    finally:
        if scratch is not None and not args.keep:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force",
                            os.path.join(scratch, "base")], capture_output=True)
            shutil.rmtree(scratch, ignore_errors=True)


def compare(args: argparse.Namespace, head: str, base: str) -> int:
    """The rounds and the summary; the exit status."""
    arms = {"head": (head, "nak"), "base": (base, "nak")}
    if args.ack:
        arms["ack"] = (head, "ack")
    names = list(arms)
    print(f"[ab] {args.rounds} rounds of W8, {args.count:,} x {args.size} B, "
          f"arms {', '.join(names)}", flush=True)
    rounds: list[dict[str, dict[str, Any]]] = []
    for i in range(args.rounds):
        order = names[i % len(names):] + names[:i % len(names)]
        res = {}
        for arm in order:
            try:
                res[arm] = run_arm(arms[arm][0], arms[arm][1], args.count, args.size)
            except (RuntimeError, KeyError, subprocess.SubprocessError) as e:
                raise SetupError(f"{arm} ({arms[arm][0]}) failed in round {i + 1}: {e}") from e
        rounds.append(res)
        print(f"round {i + 1}/{args.rounds} ({','.join(order)}): head/base "
              f"{res['head']['rate'] / res['base']['rate']:.3f}  " + "  ".join(
                  f"{arm} {res[arm]['rate']:,.0f} [{res[arm]['start']}, cuts "
                  f"{res[arm]['cuts']}, p99 {res[arm].get('p99_ms', 0):.0f} ms, missing "
                  f"{res[arm]['missing']}]" for arm in names),
              flush=True)
    result = summary(rounds, names)
    hb = result["head_over_base"]
    ci = (f"95 % interval {hb['ci95'][0]:.3f}-{hb['ci95'][1]:.3f}" if hb["ci95"]
          else f"no interval under {MIN_ROUNDS_CI} rounds")
    print(f"head/base: median {hb['median']:.3f} ({ci}), mean {hb['mean']:.3f}, "
          f"over {len(rounds)} rounds")
    for arm in names:
        a = result["arms"][arm]
        print(f"{arm}: median {a['median_rate']:,} msgs/s, p99 {a['median_p99_ms']} ms, "
              f"at most one cut in "
              f"{a['at_most_one_cut']} of {len(rounds)}, missing {a['missing']}, starts "
              + ", ".join(f"{k} {v}" for k, v in sorted(a["starts"].items())))
    if args.ack:
        print(f"over ack: head {result['head_over_ack']['median']:.3f}, base "
              f"{result['base_over_ack']['median']:.3f} (medians)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "head": head, "base": base,
                       "rounds": rounds, "summary": result}, f, indent=1)
    return 1 if any(a["missing"] for a in result["arms"].values()) else 0

if __name__ == "__main__":
    sys.exit(main())
