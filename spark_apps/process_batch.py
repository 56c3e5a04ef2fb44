"""spark-submit entry point of the DAG's batch step: dedup, then the GX gate, in one application.

    spark-submit [--master ...] spark_apps/process_batch.py --input PATH --warehouse DIR --batch-id ID \
        [--config FILE] [--invalidate-later]

Exit codes: 0 committed and gate passed, 2 user error, 3 gate failed (committed, not publishable),
1 internal error. The logic is msgdedup.pipeline.
"""

import sys

from msgdedup import submit_path

submit_path.prefer_installed_pyspark()  # before anything imports pyspark

from msgdedup.pipeline import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
