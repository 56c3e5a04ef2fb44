#!/usr/bin/env bash
# Make the venv's Spark launchers (spark-submit, spark-class, pyspark) self-contained.
#
# The pip-installed launchers find SPARK_HOME by running whatever `python3` is first on PATH, and
# Spark's Python workers default to that interpreter too: outside an activated venv both pick the
# system Python, which has neither pyspark nor this project. We pin both to the venv, so
# `.venv/bin/spark-submit ...` works exactly as documented from any shell. Explicit SPARK_HOME /
# PYSPARK_PYTHON settings still win.
set -euo pipefail
venv="$(cd "${1:-.venv}" && pwd)"
python="$venv/bin/python"
spark_home="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"

# uv may install these files as hard links shared with its cache and with every other venv made
# from it: writing through such a link would rebind all of them. Remove first, then write our own.
rm -f "$venv/bin/find-spark-home" "$spark_home/conf/spark-env.sh" "$spark_home/conf/log4j2.properties"
cat > "$venv/bin/find-spark-home" <<SH
# Written by scripts/bind_spark_to_venv.sh (make setup): this venv's Spark.
if [ -z "\${SPARK_HOME:-}" ]; then
  export SPARK_HOME="$spark_home"
fi
SH

mkdir -p "$spark_home/conf"
cat > "$spark_home/conf/spark-env.sh" <<SH
# Written by scripts/bind_spark_to_venv.sh (make setup): Python workers run the venv's interpreter.
PYSPARK_PYTHON="\${PYSPARK_PYTHON:-$python}"
PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-$python}"
SH
cp "$(dirname "$0")/../conf/spark/log4j2.properties" "$spark_home/conf/log4j2.properties"
echo "bound Spark launchers in $venv to $spark_home"
