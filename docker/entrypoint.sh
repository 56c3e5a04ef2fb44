#!/bin/sh
# Container entry point: write Spark's configuration from the environment, then run the command.
#
# Spark's RPC authentication needs the same secret in the master, the workers and every
# spark-submit (the Airflow tasks). It comes from SPARK_AUTH_SECRET (set in .env) and is written
# to a spark-defaults.conf readable only by this user, rather than passed as -D options that any
# process listing would show.
set -eu
spark_home="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
mkdir -p "$SPARK_CONF_DIR"
cp "$spark_home/conf/"* "$SPARK_CONF_DIR/" 2>/dev/null || true
umask 077
{
  echo "spark.pyspark.python ${PYSPARK_PYTHON}"
  if [ -n "${SPARK_AUTH_SECRET:-}" ]; then
    echo "spark.authenticate true"
    echo "spark.authenticate.secret ${SPARK_AUTH_SECRET}"
  fi
} > "$SPARK_CONF_DIR/spark-defaults.conf"
exec "$@"
