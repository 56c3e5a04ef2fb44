"""The batch command as users and the DAG call it (real spark-submit processes), and its crash
safety: killed at each step of a run, a re-run leaves exactly the outputs of one clean run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from msgdedup.config import parse_settings
from msgdedup.engine.batch import Cancelled, run_batch
from msgdedup.engine.warehouse import FAILPOINT_ENV, FAILPOINT_EXIT_CODE

from tests.engine.support import message, outcome_view, write_batch
from tests.spark_submit import SPARK_SUBMIT, user_env

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "spark_apps" / "dedup_batch.py"
H5, H6 = "2026-11-21T05", "2026-11-21T06"


def batch_command(*args, env=None, **popen):
    """The documented command line, run from a clean environment like a user's shell."""
    clean = user_env(**(env or {}))
    command = [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(APP), *args]
    return subprocess.Popen(command, env=clean, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **popen)


def run_command(*args, env=None, timeout=300):
    process = batch_command(*args, env=env)
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


# Spark's launcher always adds this JDK module, and the JDK always says so (no switch to silence it).
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def _assert_one_line_error(code, console, expected_code, fragment):
    """spark-submit merges the Python app's stderr into its stdout: check what the console shows."""
    assert code == expected_code, console
    lines = [line for line in console.splitlines() if line.strip() and line.strip() != JVM_NOTICE]
    assert len(lines) == 1, console
    assert lines[0].startswith("dedup_batch: error: ") and fragment in lines[0], console


def test_batch_command_commits_a_batch(tmp_path):
    write_batch(tmp_path / "raw", {"a.jsonl": [message("m1", key="x"), message("m2", key="x", at=2), "oops"]})
    code, out, err = run_command("--input", str(tmp_path / "raw"), "--warehouse", str(tmp_path / "wh"),
                                 "--batch-id", H5)
    assert code == 0, err
    assert f"committed batch {H5}: 3 lines, 1 delivered, 1 dropped, 1 quarantined" in out
    assert (tmp_path / "wh" / "runs" / f"{H5}.json").exists()


@pytest.mark.parametrize("args,fragment", [
    (["--config", "{cfg}"], "unknown key(s) id_cache"),
    (["--batch-id", "../../etc"], "invalid batch id"),
    (["--batch-id", "2026-11-21T05; rm -rf /"], "invalid batch id"),
])
def test_user_errors_before_spark_starts(tmp_path, args, fragment):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text('address_settings:\n  "#": {id_cache: 5}\n')
    base = {"--input": str(tmp_path), "--warehouse": str(tmp_path / "wh"), "--batch-id": H5}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value.format(cfg=cfg)
    code, out, err = run_command(*[x for kv in base.items() for x in kv])
    _assert_one_line_error(code, out + err, 2, fragment)


def test_missing_input_and_stale_history_are_user_errors(spark, tmp_path):
    code, out, err = run_command("--input", str(tmp_path / "nope"), "--warehouse", str(tmp_path / "wh"),
                                 "--batch-id", H5)
    _assert_one_line_error(code, out + err, 2, "input path does not exist")

    write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="x")]})
    write_batch(tmp_path / "r6", {"a.jsonl": [message("m2", key="y")]})
    run_batch(spark, str(tmp_path / "r6"), str(tmp_path / "wh"), H6)
    code, out, err = run_command("--input", str(tmp_path / "r5"), "--warehouse", str(tmp_path / "wh"),
                                 "--batch-id", H5)
    _assert_one_line_error(code, out + err, 2, "--invalidate-later")


def test_a_batch_whose_caller_went_away_commits_nothing(spark, tmp_path):
    """The batch service's client went away after the batch's last Spark job (cancelling jobs no
    longer stops it): the check right before the commit does, and the retry runs at once."""
    write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="x")]})
    wh = tmp_path / "wh"
    with pytest.raises(Cancelled, match="nothing was committed"):
        run_batch(spark, str(tmp_path / "r5"), str(wh), H5, cancelled=lambda: True)
    assert not (wh / "runs" / f"{H5}.json").exists()
    assert not (wh / "_commits").exists() or not any((wh / "_commits").iterdir())
    assert not (wh / "_WRITER.json").exists(), "the warehouse was given back"
    run_batch(spark, str(tmp_path / "r5"), str(wh), H5, cancelled=lambda: False)
    assert len(list((wh / "_commits").iterdir())) == 1 and (wh / "runs" / f"{H5}.json").exists()


def test_outputs_write_distinct_valued_columns_without_a_dictionary(spark, tmp_path):
    """Parquet's writer gives every column a dictionary until it outgrows its page; for ids, keys
    and bodies that work is thrown away, so they are written plain (batch.PLAIN_COLUMNS), while a
    column whose values repeat keeps its dictionary. The batch repeats the plain columns' values
    too (one body, one key, one bad line), which a dictionary would take."""
    import pyarrow.parquet as pq

    from msgdedup.engine.batch import PLAIN_COLUMNS

    lines = [message(f"m{i}", key="x", at=i, body="the same body") for i in range(100)] + ["oops"] * 20
    write_batch(tmp_path / "raw", {"a.jsonl": lines})
    run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), H5)
    encodings = {}  # (output, column) -> the encodings of its column chunks
    for output in ("delivered", "dropped", "quarantine"):
        for part in (tmp_path / "wh" / output).rglob("*.parquet"):
            metadata = pq.ParquetFile(part).metadata
            for group in range(metadata.num_row_groups):
                for index in range(metadata.num_columns):
                    chunk = metadata.row_group(group).column(index)
                    encodings.setdefault((output, chunk.path_in_schema), set()).update(chunk.encodings)
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert encodings[("dropped", "address")] & dictionary, encodings[("dropped", "address")]
    plain = {key: codes for key, codes in encodings.items() if key[1] in PLAIN_COLUMNS}
    assert {("delivered", "body"), ("dropped", "body"), ("dropped", "dedup_key"), ("dropped", "duplicate_of"),
            ("quarantine", "raw_line")} <= set(plain), sorted(encodings)
    assert all(not codes & dictionary for codes in plain.values()), plain


# -- crash safety -----------------------------------------------------------------------------------
FAILPOINTS = ["after_parse", "while_staging", "before_commit_point", "after_commit_point",
              "mid_publish", "before_manifest", "before_cleanup"]


@pytest.fixture(scope="module")
def clean_run(spark, tmp_path_factory):
    """Two batches and the warehouse one clean run of each gives."""
    root = tmp_path_factory.mktemp("clean")
    write_batch(root / "r5", {"a.jsonl": [message(f"a{i}", key=f"k{i % 4}", at=i) for i in range(10)] + ["bad"]})
    write_batch(root / "r6", {"a.jsonl": [message(f"b{i}", key=f"k{i % 6}", at=i, txn="T" if i in (3, 4) else None)
                                          for i in range(10)]})
    settings = parse_settings({"address_settings": {"#": {"id_cache_size": 3}}})
    cfg = root / "cfg.yaml"
    cfg.write_text('address_settings:\n  "#": {id_cache_size: 3}\n')
    run_batch(spark, str(root / "r5"), str(root / "after_h5"), H5, settings)
    shutil.copytree(root / "after_h5", root / "clean")
    run_batch(spark, str(root / "r6"), str(root / "clean"), H6, settings)
    return root, settings, cfg, {b: outcome_view(root / "clean", b) for b in (H5, H6)}


def _warehouse_with_h5(clean_run, tmp_path):
    """A copy of the warehouse as it stands after a clean run of H5 (cheaper than re-running it)."""
    root = clean_run[0]
    shutil.copytree(root / "after_h5", tmp_path / "wh")
    return tmp_path / "wh"


@pytest.mark.parametrize("point", FAILPOINTS)
def test_crash_at_any_step_then_rerun_gives_one_clean_run(spark, clean_run, tmp_path, point):
    root, settings, cfg, expected = clean_run
    wh = _warehouse_with_h5(clean_run, tmp_path)
    code, _, err = run_command("--input", str(root / "r6"), "--warehouse", str(wh), "--batch-id", H6,
                               "--config", str(cfg), env={FAILPOINT_ENV: point})
    assert code == FAILPOINT_EXIT_CODE, err
    committed_before = (wh / "runs" / f"{H6}.json").exists()
    # before the commit point nothing of H6 is committed; after it the manifest appears last
    if point in ("after_parse", "while_staging", "before_commit_point", "after_commit_point",
                 "mid_publish", "before_manifest"):
        assert not committed_before
    run_batch(spark, str(root / "r6"), str(wh), H6, settings)
    assert outcome_view(wh, H5) == expected[H5]
    assert outcome_view(wh, H6) == expected[H6]
    assert not (wh / "_staging").exists() or not list((wh / "_staging").iterdir())


def test_crash_while_rerunning_a_committed_batch(spark, clean_run, tmp_path):
    """A re-run killed mid-publish must not leave a mix of old and new files behind."""
    root, settings, cfg, expected = clean_run
    shutil.copytree(root / "clean", tmp_path / "wh")
    wh = tmp_path / "wh"
    code, _, err = run_command("--input", str(root / "r6"), "--warehouse", str(wh), "--batch-id", H6,
                               "--config", str(cfg), env={FAILPOINT_ENV: "mid_publish"})
    assert code == FAILPOINT_EXIT_CODE, err
    assert not (wh / "runs" / f"{H6}.json").exists()  # half-swapped: not committed
    run_batch(spark, str(root / "r5"), str(wh), H5, settings)  # any next run recovers first
    assert outcome_view(wh, H6) == expected[H6]


def test_sigkill_during_writing(spark, clean_run, tmp_path):
    """A real SIGKILL of the whole spark-submit process tree while outputs are being staged."""
    root, settings, cfg, expected = clean_run
    wh = _warehouse_with_h5(clean_run, tmp_path)
    process = batch_command("--input", str(root / "r6"), "--warehouse", str(wh), "--batch-id", H6,
                            "--config", str(cfg))
    deadline = time.monotonic() + 240
    staging = wh / "_staging" / H6
    while time.monotonic() < deadline and process.poll() is None:
        if staging.exists() and any(staging.glob("*/delivered/**/*.parquet")):
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (wh / "runs" / f"{H6}.json").exists()
    # The killed writer's lease is still there, unexpired: the next run on this host breaks it
    # because its process is gone, without waiting for it to expire.
    held = json.loads((wh / "_WRITER.json").read_text())
    assert held["batch_id"] == H6 and held["pid"] != os.getpid()
    assert datetime.fromisoformat(held["expires_at"]) > datetime.now(timezone.utc)
    run_batch(spark, str(root / "r6"), str(wh), H6, settings)
    assert outcome_view(wh, H6) == expected[H6]
    assert outcome_view(wh, H5) == expected[H5]
    assert not (wh / "_WRITER.json").exists()
    assert not (wh / "_staging").exists() or not list((wh / "_staging").iterdir())


def _internal_error() -> Exception:
    try:
        {}["cache"]  # noqa: B018 - a bug, as the engine would meet one
    except KeyError as error:
        return error
    raise AssertionError("unreachable")


def test_an_internal_error_prints_its_trace_and_ends_with_one_line(capsys):
    """A user error is one line; an internal error (a bug) also prints the trace a bug report
    needs, before the same one-line summary (the last line, what the Airflow task log ends with)."""
    from msgdedup import exit_codes
    from msgdedup.engine.batch import report_error

    assert report_error(ValueError("bad config\nmore"), exit_codes.USER_ERROR) == exit_codes.USER_ERROR
    assert capsys.readouterr().err == "dedup_batch: error: bad config\n"
    assert report_error(_internal_error(), exit_codes.INTERNAL_ERROR) == exit_codes.INTERNAL_ERROR
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and "in _internal_error" in "\n".join(err)
    assert err[-1] == "dedup_batch: internal error (KeyError): 'cache'"
