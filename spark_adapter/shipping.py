"""Get nakflow onto a cluster's executors, and say clearly when it is not there.

Executors run their own Python (``spark.pyspark.python``, by default the ``python3`` on
each worker host), which knows nothing of the driver's venv. The writer's task code needs
``nakflow``, ``transports`` and ``spark_adapter`` (pure Python) and ``pyzmq`` and
``msgpack`` (compiled). :func:`build_bundle` packs exactly those, as installed here, into a
zip that Spark ships and unpacks next to every executor (``spark.archives``), and
:func:`bundle_conf` gives the settings that put it on the Python workers' path. The
executors' Python must then be the same CPython minor version on the same platform as
the driver's (compiled modules are built for one); :func:`check_executors` runs a probe
task and raises :class:`ExecutorImportError` with one line saying what is missing where.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import re
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Any

#: Our packages that tasks import (the simulator stays on the driver).
PACKAGES = ("nakflow", "transports", "spark_adapter")
#: Installed distributions the task code imports, shipped with their compiled parts.
DISTRIBUTIONS = ("pyzmq", "msgpack")
#: Shipped too when installed (pure Python): Pushgateway pushes from tasks.
OPTIONAL_DISTRIBUTIONS = ("prometheus-client",)
#: What a probe task tries to import on an executor.
MODULES = (*PACKAGES, "zmq", "msgpack")
#: The folder the bundle is unpacked into, in each executor's working directory.
BUNDLE_DIR = "nakflow_bundle"
SHIP_CHOICES = ("auto", "bundle", "none")

_HOW = ("ship it with spark_session(..., ship='bundle') / nakflow eval --ship bundle, or "
        "point spark.pyspark.python (PYSPARK_PYTHON) at a Python that has nakflow "
        "installed on every worker; see README 'Running on a Spark cluster'")


class ExecutorImportError(RuntimeError):
    """The executors' Python cannot import what the writer's tasks need."""


def _package_files(name: str) -> Iterator[tuple[str, str]]:
    """(path on disk, path in the bundle) for one of our pure-Python packages."""
    module = __import__(name)
    root = os.path.dirname(os.path.abspath(module.__file__ or ""))
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for file in sorted(files):
            if file.endswith((".py", "py.typed")):
                path = os.path.join(folder, file)
                yield path, os.path.join(name, os.path.relpath(path, root))


def _distribution_files(name: str) -> Iterator[tuple[str, str]]:
    """(path on disk, path in the bundle) for an installed distribution's importable files."""
    dist = metadata.distribution(name)
    for entry in dist.files or ():
        parts = entry.parts
        if parts[0] == ".." or "__pycache__" in parts or parts[0].endswith(".dist-info"):
            continue  # scripts outside site-packages, caches, metadata
        path = str(dist.locate_file(entry))
        if os.path.isfile(path):
            yield path, str(entry)


def bundle_contents() -> list[tuple[str, str]]:
    files = [f for name in PACKAGES for f in _package_files(name)]
    files += [f for name in DISTRIBUTIONS for f in _distribution_files(name)]
    for name in OPTIONAL_DISTRIBUTIONS:  # shipped when installed here
        try:
            files += list(_distribution_files(name))
        except metadata.PackageNotFoundError:
            pass
    return sorted(files, key=lambda f: f[1])


def build_bundle(folder: str | None = None) -> str:
    """Write (or reuse) the zip of nakflow and its dependencies; returns its path.

    The name carries a digest of every file's path, size and modification time and of
    the Python tag, so a changed install makes a new bundle and an unchanged one is reused.
    """
    files = bundle_contents()
    digest = hashlib.sha256(sysconfig.get_platform().encode() + sys.version.encode())
    for path, arc in files:
        st = os.stat(path)
        digest.update(f"{arc}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    folder = folder or os.path.join(tempfile.gettempdir(), "nakflow-bundles")
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, f"nakflow-bundle-{digest.hexdigest()[:16]}.zip")
    if not os.path.exists(target):
        partial = f"{target}.{os.getpid()}.partial"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for path, arc in files:
                zf.write(path, arc)
        os.replace(partial, target)
    return target


def bundle_conf(path: str, existing: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings that ship the bundle and put it on the executors' Python path."""
    existing = existing or {}
    archives = ",".join(a for a in (existing.get("spark.archives", ""),
                                    f"{path}#{BUNDLE_DIR}") if a)
    pythonpath = os.pathsep.join(p for p in (BUNDLE_DIR,
                                             existing.get("spark.executorEnv.PYTHONPATH", ""))
                                 if p)
    return {"spark.archives": archives, "spark.executorEnv.PYTHONPATH": pythonpath}


_PROBE_SOURCE = '''
def probe(_rows):
    import importlib, platform, socket, sys
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    yield (socket.gethostname(), sys.executable, "%d.%d" % sys.version_info[:2],
           platform.machine(), missing)
'''


def _probe() -> Any:
    """The probe task, defined in a ``__main__`` namespace so Spark pickles it by value
    (an executor that cannot import nakflow can still run it)."""
    namespace: dict[str, Any] = {"__name__": "__main__", "MODULES": MODULES}
    exec(compile(_PROBE_SOURCE, "<nakflow executor probe>", "exec"), namespace)
    return namespace["probe"]


def check_executors(spark: Any, tasks: int | None = None) -> list[tuple[Any, ...]]:
    """Run a probe task per slot; raise ExecutorImportError if any executor lacks a module
    or runs another Python version than the driver. Returns the distinct probe results."""
    sc = spark.sparkContext
    tasks = tasks or max(2, 2 * sc.defaultParallelism)
    seen = sorted({(host, exe, ver, machine, tuple(missing))
                   for host, exe, ver, machine, missing in
                   sc.parallelize(range(tasks), tasks).mapPartitions(_probe()).collect()})
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for host, exe, ver, _machine, missing in seen:
        if missing:
            raise ExecutorImportError(
                f"Spark executors cannot import nakflow: Python {exe} ({ver}) on {host} "
                f"lacks {', '.join(m.split(' ')[0] for m in missing)}; {_HOW}")
        if ver != driver:
            raise ExecutorImportError(
                f"Spark executors run Python {ver} ({exe} on {host}) but the driver runs "
                f"{driver}; PySpark needs the same minor version on both: set "
                f"spark.pyspark.python (PYSPARK_PYTHON)")
    return list(seen)


def _imports(name: str) -> Any:
    def probe(_: Iterator[Any]) -> Iterator[bool]:
        try:
            __import__(name)
        except ImportError:
            yield False
        else:
            yield True
    return probe


def executors_import(spark: Any, module: str) -> bool:
    """Can every executor slot import ``module`` (e.g. ``pyarrow``, which the data source's
    Arrow writer needs on the executors and which is too big to ship with each job)?"""
    sc = spark.sparkContext
    tasks = max(2, 2 * sc.defaultParallelism)
    return all(sc.parallelize(range(tasks), tasks).mapPartitions(_imports(module)).collect())


_MISSING = re.compile(r"No module named '([\w.]+)'")


def explain(exc: BaseException) -> ExecutorImportError | None:
    """An ExecutorImportError for a Spark job failure caused by an executor-side import of
    our code or its dependencies (else None)."""
    match = _MISSING.search(str(exc))
    if match is None or match.group(1).split(".")[0] not in MODULES:
        return None
    return ExecutorImportError(f"Spark executors cannot import {match.group(1)!r}; {_HOW}")
