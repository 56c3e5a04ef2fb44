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
from pathlib import Path


def _zipped_package(name: str) -> str | None:
    """The package a zip of ``$SPARK_HOME/python/lib`` holds, by its file name (None: not one of them)."""
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j") and name.endswith(".zip"):  # py4j-<version>-src.zip
        return "py4j"
    return None


def _installed_copy(entry: str, sites: set[Path]) -> bool:
    """Whether ``entry`` is a zip inside an installed pyspark package (``<site>/pyspark/python/lib``)
    whose site directory is one of ``sites`` and holds the zip's package installed."""
    zipped = Path(os.path.abspath(entry))
    package = _zipped_package(zipped.name)
    if package is None or zipped.parent.parts[-3:] != ("pyspark", "python", "lib"):
        return False
    site = zipped.parents[3]
    return site in sites and (site / package / "__init__.py").is_file()


def prefer_installed_pyspark() -> None:
    """Drop spark-submit's zips of pyspark and py4j from ``sys.path`` where the same packages are
    installed on it; a no-op once pyspark is imported (it stays where it came from)."""
    if "pyspark" in sys.modules or "py4j" in sys.modules:
        return
    sites = {Path(os.path.abspath(entry)) for entry in sys.path if entry}
    sys.path[:] = [entry for entry in sys.path if not _installed_copy(entry, sites)]
