"""Quality gate of one committed batch (thin entry point; the logic is msgdedup.quality).

    .venv/bin/spark-submit spark_apps/gx_gate.py --warehouse DIR --batch-id ID [--config FILE]

Exit codes: 0 gate passed, 3 gate failed (failed expectations summarised on stderr),
2 user error (e.g. batch not committed), 1 internal error.
"""

import sys

from msgdedup import submit_path

submit_path.prefer_installed_pyspark()  # before anything imports pyspark

from msgdedup.quality.gate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
