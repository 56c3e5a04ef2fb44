"""Exit codes of every Spark app (``spark_apps/*.py``), and what the DAG does with each.

One definition, because three parties read them: the apps return them, the Airflow operator
decides retry-or-fail from them, and users read them in the README.
"""

from __future__ import annotations

OK = 0
INTERNAL_ERROR = 1  # anything unexpected (a lost executor, a bug): safe to retry
USER_ERROR = 2  # bad input, config or batch id, stale history, a commit conflict: a rerun fails the same way
GATE_FAILED = 3  # committed, but the Great Expectations gate failed: not publishable
WAREHOUSE_BUSY = 4  # another writer holds the warehouse's lease: retry later

# exit code -> why the DAG does not retry it
FINAL: dict[int, str] = {
    USER_ERROR: "user error (bad input, config or batch id, a commit conflict, or stale history: to "
    "reprocess an older batch trigger it with invalidate_later=true, then re-run the later "
    "partitions in order)",
    GATE_FAILED: "the Great Expectations gate failed: the batch is committed but not published "
    "(see the Data quality view)",
}
