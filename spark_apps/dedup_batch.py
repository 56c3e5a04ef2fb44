"""spark-submit entry point of the batch command; see README.md ("The batch command").

    spark-submit [--master ...] spark_apps/dedup_batch.py --input PATH --warehouse DIR --batch-id ID [--config FILE]
"""

import sys

from msgdedup import submit_path

submit_path.prefer_installed_pyspark()  # before anything imports pyspark

from msgdedup.engine.batch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
