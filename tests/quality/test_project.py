"""The committed GX project (expectations/) is what checks.py defines, and loads in GX."""

from __future__ import annotations

import json
from pathlib import Path

from msgdedup.quality.checks import CHECKED_TABLES, DATA_DOCS_SITE, checkpoint_name
from msgdedup.quality.project import QUALITY_DIR_VARIABLE, default_project_dir, open_context

PROJECT = Path(__file__).resolve().parents[2] / "expectations"


def _expectation_signature(expectation: dict) -> tuple:
    kwargs = {k: v for k, v in expectation["kwargs"].items() if k != "batch_id"}
    return expectation["type"], json.dumps(kwargs, sort_keys=True)


def test_committed_suites_and_checkpoints_match_checks_py(tmp_path):
    assert default_project_dir() == PROJECT
    for table in CHECKED_TABLES:
        suite = json.loads((PROJECT / "expectations" / f"{table.name}.json").read_text())
        expected = [
            _expectation_signature(e.configuration.to_json_dict()) for e in table.build_expectations()
        ]
        assert [_expectation_signature(e) for e in suite["expectations"]] == expected, (
            f"expectations/ is out of date for {table.name}: run python -m msgdedup.quality.project expectations")
        # One suite, a checkpoint for it on Spark frames and one on pandas frames (small batches).
        for name in (checkpoint_name(table.name), checkpoint_name(table.name, pandas=True)):
            checkpoint = json.loads((PROJECT / "checkpoints" / f"{name}.json").read_text())
            assert checkpoint["result_format"] == table.result_format()
            # The gate builds the Data Docs once for all five checkpoints' results (gate.run_gate).
            assert checkpoint["actions"] == []
            definition = json.loads((PROJECT / "validation_definitions" / f"{name}.json").read_text())
            assert definition["suite"]["name"] == table.name


# GX evaluates an expectation's condition once per metric (count, sample values, sample rows):
# these are plain per-row conditions. Uniqueness (a window) belongs in tables.py, computed once.
ROW_CONDITIONS = {
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_null",
    "expect_column_pair_values_to_be_equal", "expect_column_pair_values_a_to_be_greater_than_b",
}


def test_every_expectation_is_a_per_row_condition():
    types = {e.expectation_type for table in CHECKED_TABLES for e in table.build_expectations()}
    assert types <= ROW_CONDITIONS, types - ROW_CONDITIONS


def test_project_loads_with_stores_outside_git(tmp_path):
    config = (PROJECT / "great_expectations.yml").read_text()
    assert f"${{{QUALITY_DIR_VARIABLE}}}/validations/" in config
    assert f"${{{QUALITY_DIR_VARIABLE}}}/data_docs/" in config
    assert "analytics_enabled: false" in config
    context = open_context(PROJECT, str(tmp_path))
    assert sorted(c.name for c in context.checkpoints.all()) == sorted(
        checkpoint_name(t.name, pandas) for t in CHECKED_TABLES for pandas in (False, True))
    urls = context.get_docs_sites_urls(site_name=DATA_DOCS_SITE, only_if_exists=False)
    assert urls[0]["site_url"].startswith(f"file://{tmp_path}/data_docs")


def test_a_checked_table_keeps_the_columns_gx_reads_of_it():
    """The gate keeps (caches, collects) each checked table with ``CheckedTable.columns`` only: every
    column an expectation's domain names, and the index columns that name an offending row."""
    for table in CHECKED_TABLES:
        read = set(table.result_format()["unexpected_index_column_names"])
        for expectation in table.build_expectations():
            domain = expectation.configuration.get_domain_kwargs()
            assert set(domain) <= {"column", "column_A", "column_B", "batch_id", "row_condition",
                                   "condition_parser"}, domain
            read |= {domain[name] for name in ("column", "column_A", "column_B") if name in domain}
        assert set(table.columns) == read, table.name
        assert table.columns[:len(table.index_columns)] == table.index_columns
