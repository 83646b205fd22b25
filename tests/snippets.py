"""The code blocks of README.md and docs/ that a user runs, extracted for the tests.

Every fenced block preceded by ``<!-- snippet: NAME -->`` is a snippet. Tests run them
unchanged with :func:`run_snippet`: in a temporary directory laid out like a clone's root
(``.venv`` and ``benchmarks/`` linked there, so ``.venv/bin/python benchmarks/suite.py``
works as written), bash with the venv first on PATH. Blocks that are not snippets show
output, a file to install, or a design history's quotation; ``test_readme`` says which
kinds may stay untested.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: README and the pages of the docs site a user reads and runs from (not the history)
PAGES = {"README.md": (ROOT / "README.md").read_text(), **{
    str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))
    if "design" not in p.parts}}
SNIPPET = re.compile(r"<!-- snippet: (\S+) -->\n```(\w+)\n(.*?)\n```", re.S)
FOUND = [(name, page, code) for page, text in PAGES.items()
         for name, _lang, code in SNIPPET.findall(text)]
SNIPPETS = {name: code for name, _page, code in FOUND}
LANGS = {name: lang for text in PAGES.values() for name, lang, _code in SNIPPET.findall(text)}
VENV = pathlib.Path(sys.executable).parent.parent


def run(args: list[str], cwd: pathlib.Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_snippet(name: str, cwd: pathlib.Path, timeout: float, *,
                prefix: str = "") -> subprocess.CompletedProcess[str]:
    """Run snippet ``name`` as written from ``cwd`` set up like a clone's root (``prefix``:
    other snippets' code to run first, as the page says to)."""
    for link, target in ((".venv", VENV), ("benchmarks", ROOT / "benchmarks")):
        if not (cwd / link).exists():
            (cwd / link).symlink_to(target)
    code = SNIPPETS[name]
    if LANGS[name] == "python":
        (cwd / pathlib.Path(name).name).write_text(code)
        return run([sys.executable, pathlib.Path(name).name], cwd, timeout)
    return run(["bash", "-ec", f"{prefix}\n{code}" if prefix else code], cwd, timeout)

