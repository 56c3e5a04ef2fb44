"""spark-submit entry point of the warm batch service: one Spark application, many batches.

    spark-submit [--master ...] spark_apps/batch_service.py --socket PATH

It serves ``process_batch`` requests on the Unix socket PATH until SIGTERM; the DAG's
``process_batch`` task sends them when the Airflow Variable ``msgdedup_batch_service`` names PATH.
The logic is msgdedup.batch_service.
"""

import sys

from msgdedup import submit_path

submit_path.prefer_installed_pyspark()  # before anything imports pyspark

from msgdedup.batch_service import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
