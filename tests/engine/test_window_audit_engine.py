"""The window-miss audit (§9) on Spark, on the case its plan treats apart: a transaction."""

import pytest

from msgdedup.config import parse_settings
from msgdedup.engine.batch import run_batch
from msgdedup.engine.planning import DRIVER_DECIDE_LINES_CONF, DRIVER_KERNEL_ROWS_CONF
from msgdedup.reference_model import ReferenceModel

from tests.engine.support import message, model_view, outcome_view, write_batch

SETTINGS = parse_settings({"address_settings": {"#": {"id_cache_size": 2}}, "window_audit": {}})
H5, H6 = "2026-11-21T05", "2026-11-21T06"


@pytest.fixture(params=["driver", "kernel on driver", "spark"])
def planned(request, spark):
    """The plans (engine/batch.py): the small batch decided on the driver; decided in Spark with
    its kernel on the driver; and with its kernel in a Spark task. The first two audit on the
    driver (driver_audit.py), the last in Spark (audit.py)."""
    if request.param != "driver":
        spark.conf.set(DRIVER_DECIDE_LINES_CONF, "-1")
    if request.param == "spark":
        spark.conf.set(DRIVER_KERNEL_ROWS_CONF, "-1")
    yield spark
    spark.conf.unset(DRIVER_KERNEL_ROWS_CONF)
    spark.conf.unset(DRIVER_DECIDE_LINES_CONF)


def test_a_transactions_miss_is_measured_from_its_lookup_before_its_first_acceptance(planned, tmp_path):
    """k1 leaves the 2-key window in the first batch; in the second, a transaction resends it after
    a new key. The transaction's lookup comes before its first acceptance (k9's), so k1 was
    missed by one key less than its own acceptance would say: the engine must find that unit's
    first acceptance among messages that are not audited themselves (audit.window_misses)."""
    first = write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="k1", at=1), message("m2", key="k2", at=2),
                                                       message("m3", key="k3", at=3)]})
    second = write_batch(tmp_path / "r6", {"a.jsonl": [message("n1", key="k4", at=1),
                                                        message("n2", key="k9", at=2, txn="T"),
                                                        message("n3", key="k1", at=3, txn="T")]})
    oracle = ReferenceModel()
    oracle.run_batch(H5, first, SETTINGS)
    expected = model_view(oracle.run_batch(H6, second, SETTINGS))
    run_batch(planned, str(tmp_path / "r5"), str(tmp_path / "wh"), H5, SETTINGS)
    run_batch(planned, str(tmp_path / "r6"), str(tmp_path / "wh"), H6, SETTINGS)
    got = outcome_view(tmp_path / "wh", H6)
    assert got == expected
    # k1 accepted at seq 1; the transaction's first acceptance is k9's (seq 5), before k1's own
    # (seq 6): a window of 4 would have held k1 at the lookup, so it was missed by 2, not 3.
    assert dict(got["window_audit"]["a"]) == {"id_cache_size": 2, "misses": 1, "max_missed_by": 2,
                                              "recommended_id_cache_size": 4}
