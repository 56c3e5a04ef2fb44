"""spark-submit entry point of the batch command; see README.md ("The batch command").

    spark-submit [--master ...] spark_apps/dedup_batch.py --input PATH --warehouse DIR --batch-id ID [--config FILE]
"""

import sys

from msgdedup.engine.batch import main

if __name__ == "__main__":
    sys.exit(main())
