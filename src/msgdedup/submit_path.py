"""The driver's import path under spark-submit: the installed pyspark, not its zipped copy.

spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip at the front of
the driver's ``sys.path``. Python imports modules from a zip by compiling their source on every
start (``zipimport`` writes no bytecode): on this machine, 0.9-1.1 s to import the engine against
0.4-0.5 s installed, and 5.7-6.2 s against 4.2-4.5 s with Great Expectations (docs/benchmarks.md).
Where ``SPARK_HOME`` is a pip-installed pyspark (this project's ``.venv``), the same wheel installed
the same modules beside it, compiled (``uv sync --compile-bytecode``): the zips are dropped, and
pyspark and py4j load from there. A Spark distribution's own zips (``SPARK_HOME`` elsewhere, a
cluster's install) are left alone.
"""

from __future__ import annotations

import os
import sys

_ZIPPED = {"pyspark.zip": "pyspark", "py4j": "py4j"}  # zip name (or its prefix) -> the package it holds


def _installed_copy(entry: str) -> bool:
    """Whether ``entry`` is a zip inside an installed pyspark package whose site directory, on the
    path too, holds the zip's package installed."""
    path = os.path.abspath(entry)
    lib, name = os.path.split(path)
    package = next((pkg for prefix, pkg in _ZIPPED.items() if name.startswith(prefix) and name.endswith(".zip")), None)
    if package is None:
        return False
    pyspark_dir = os.path.dirname(os.path.dirname(lib))  # <site>/pyspark/python/lib -> <site>/pyspark
    site = os.path.dirname(pyspark_dir)
    if os.path.basename(pyspark_dir) != "pyspark" or os.path.relpath(lib, pyspark_dir) != os.path.join("python", "lib"):
        return False
    on_path = {os.path.abspath(p) for p in sys.path if p}
    return site in on_path and os.path.isfile(os.path.join(site, package, "__init__.py"))


def prefer_installed_pyspark() -> None:
    """Drop spark-submit's zips of pyspark and py4j from ``sys.path`` where the same packages are
    installed on it; a no-op once pyspark is imported (it stays where it came from)."""
    if "pyspark" in sys.modules or "py4j" in sys.modules:
        return
    sys.path[:] = [entry for entry in sys.path if not _installed_copy(entry)]
