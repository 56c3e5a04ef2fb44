"""The warehouse layout and the batch-id rule (msgdedup.layout): pure, no Spark."""

import pytest

from msgdedup import layout


def test_paths_are_joined_once_for_uris_and_local_paths():
    assert layout.manifest("file:/w/", "2026-11-21T05") == "file:/w/runs/2026-11-21T05.json"
    assert layout.stale_manifest("/w", "B1") == "/w/runs/B1.stale.json"
    assert layout.output_dir("/w", "id_cache", "B1") == "/w/id_cache/batch_id=B1"
    assert layout.gate_result(layout.quality_dir("/w"), "B1") == "/w/quality/B1/result.json"
    assert layout.data_docs_dir(layout.quality_dir("/w")) == "/w/quality/data_docs"
    assert layout.published("/w", "B1") == "/w/published/B1.json"
    assert layout.staging_dir("/w", "B1", "r") == "/w/_staging/B1/r"
    with pytest.raises(ValueError, match="unknown output"):
        layout.output_dir("/w", "runs", "B1")


def test_manifest_names_give_their_batch_ids():
    assert layout.batch_id_of_manifest("nightly-01.json") == ("nightly-01", False)
    assert layout.batch_id_of_manifest("2026-11-21T05.stale.json") == ("2026-11-21T05", True)
    assert layout.batch_id_of_manifest("notes.txt") is None
    assert layout.batch_id_of_manifest("..json") is None


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "-x", "x\n", "a" * 101, None, 5])
def test_bad_batch_ids_are_refused(bad):
    with pytest.raises(layout.BatchIdError):
        layout.validate_batch_id(bad)


def test_a_warehouse_keeps_the_format_of_its_first_batch():
    hourly = ["2026-11-21T04", "2026-11-21T05"]
    layout.check_batch_id_format("2026-11-21T06", hourly)
    layout.check_batch_id_format("zz", [])  # an empty warehouse takes either
    layout.check_batch_id_format("nightly-02", ["nightly-01"])
    with pytest.raises(layout.BatchIdError, match="hourly batch ids YYYY-MM-DDTHH"):
        layout.check_batch_id_format("zz", hourly)
    with pytest.raises(layout.BatchIdError, match="not hourly ones"):
        layout.check_batch_id_format("2026-11-21T06", ["nightly-01"])
    with pytest.raises(layout.BatchIdError):  # not a real hour: a named id, refused among hours
        layout.check_batch_id_format("2026-13-21T05", hourly)
