"""spark-submit's zipped pyspark replaced on the driver's path by the installed one (submit_path.py)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark

from msgdedup import submit_path

from tests.spark_submit import ROOT, SPARK_SUBMIT, user_env


def _site_with_zips(root: Path) -> tuple[Path, Path, Path]:
    """A site directory with pyspark and py4j installed, and pyspark's python/lib zips of them."""
    site = root / "site-packages"
    for package in ("pyspark", "py4j"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    zips = lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"
    for z in zips:
        with zipfile.ZipFile(z, "w") as archive:
            archive.writestr("placeholder.py", "")
    return site, *zips


def test_the_zips_of_an_installed_pyspark_leave_the_path_and_a_distributions_stay(tmp_path, monkeypatch):
    site, pyspark_zip, py4j_zip = _site_with_zips(tmp_path)
    distribution = tmp_path / "spark-4.1.0" / "python" / "lib" / "pyspark.zip"  # a Spark install's own
    distribution.parent.mkdir(parents=True)
    distribution.write_bytes(pyspark_zip.read_bytes())
    for name in ("pyspark", "py4j"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", ["/app", str(pyspark_zip), str(py4j_zip), str(distribution), str(site)])

    submit_path.prefer_installed_pyspark()

    assert sys.path == ["/app", str(distribution), str(site)]


def test_the_zips_stay_where_their_site_is_not_on_the_path_or_pyspark_is_imported(tmp_path, monkeypatch):
    site, pyspark_zip, py4j_zip = _site_with_zips(tmp_path)
    for name in ("pyspark", "py4j"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", [str(pyspark_zip), str(py4j_zip)])
    submit_path.prefer_installed_pyspark()
    assert sys.path == [str(pyspark_zip), str(py4j_zip)]  # nothing else to import them from

    monkeypatch.setitem(sys.modules, "pyspark", object())
    monkeypatch.setattr(sys, "path", [str(pyspark_zip), str(py4j_zip), str(site)])
    submit_path.prefer_installed_pyspark()
    assert sys.path == [str(pyspark_zip), str(py4j_zip), str(site)]  # too late: it came from the zip


def test_every_spark_app_sets_its_path_before_importing_pyspark():
    for app in sorted((ROOT / "spark_apps").glob("*.py")):
        text = app.read_text()
        before, call, _ = text.partition("submit_path.prefer_installed_pyspark()")
        assert call, app.name
        imports = [line for line in before.splitlines() if line.startswith(("import ", "from "))]
        assert imports == ["import sys", "from msgdedup import submit_path"], app.name


def test_a_spark_submit_driver_imports_the_installed_pyspark(tmp_path):
    """The venv's spark-submit puts its zips first; the apps' first line takes pyspark from the venv."""
    app = tmp_path / "where.py"
    app.write_text("from msgdedup import submit_path\nsubmit_path.prefer_installed_pyspark()\n"
                   "import py4j, pyspark\nprint('FROM', pyspark.__file__, py4j.__file__)\n")
    done = subprocess.run([str(SPARK_SUBMIT), "--master", "local[1]", str(app)], env=user_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    pyspark_file, py4j_file = next(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("FROM "))
    site = Path(pyspark.__file__).parents[1]  # this test run's: the same venv
    assert Path(pyspark_file) == site / "pyspark" / "__init__.py"
    assert Path(py4j_file) == site / "py4j" / "__init__.py"
