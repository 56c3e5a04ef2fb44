"""Drill-down pages of a batch: paged reads of the committed Parquet outputs, the batch a
duplicate's original was delivered in, the cause of each rejected transaction, and escaping."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from msgdedup.orchestration.quality_view import (
    render_batch, render_dropped, render_message, render_quarantine, render_rejected,
)
from msgdedup import reports
from msgdedup.review import drilldown

from tests.airflow import review_warehouse as rw


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    return rw.build(tmp_path_factory.mktemp("review-wh"))


def _all_dropped_ids(wh):
    files = drilldown.output_files(wh, "dropped", rw.BATCH)
    return ds.dataset(files, format="parquet").to_table(columns=["message_id"]).column("message_id").to_pylist()


def test_dropped_pages_cross_files_and_row_groups_in_order(wh):
    expected = _all_dropped_ids(wh)
    assert len(expected) == rw.DUPLICATES + 4
    seen = []
    number = 1
    while True:
        pg = drilldown.dropped_page(wh, rw.BATCH, number, 25)
        assert pg.total == len(expected) and len(pg.rows) <= 25
        seen += [r["message_id"] for r in pg.rows]
        if not pg.has_next:
            break
        number += 1
    assert seen == expected and number == 6 and pg.pages == 6
    assert drilldown.dropped_page(wh, rw.BATCH, 99, 25).rows == []


def test_filtered_pages_use_the_manifest_counts(wh):
    pg = drilldown.dropped_page(wh, rw.BATCH, 1, 10, reason="transaction_rejected")
    assert [r["message_id"] for r in pg.rows] == ["t-2", "t-3"] and pg.total == 2 and not pg.has_next
    pg = drilldown.dropped_page(wh, rw.BATCH, 6, 25, reason="duplicate")
    assert len(pg.rows) == rw.DUPLICATES + 2 - 125 and pg.total == rw.DUPLICATES + 2 and not pg.has_next
    pg = drilldown.dropped_page(wh, rw.BATCH, 1, 10, address=rw.HOSTILE_ADDRESS)
    assert [r["message_id"] for r in pg.rows] == [rw.HOSTILE_DROPPED] and pg.total == 1
    with pytest.raises(ValueError, match="reason"):
        drilldown.dropped_page(wh, rw.BATCH, reason="bogus")


def test_a_duplicate_names_the_batch_its_original_was_delivered_in(wh):
    rows = {r["message_id"]: r for r in drilldown.dropped_page(wh, rw.BATCH, 1, 500).rows}
    assert rows["d-000"]["duplicate_of"] == "m-old" and rows["d-000"]["duplicate_of_batch"] == rw.OLDER
    assert rows["d-001"]["duplicate_of"] == "m-1" and rows["d-001"]["duplicate_of_batch"] == rw.BATCH
    assert rows["t-dup"]["duplicate_of_batch"] == rw.PARENT
    # a rejected message's duplicate_of is the duplicate in its transaction: this batch
    assert rows["t-2"]["duplicate_of"] == "t-dup" and rows["t-2"]["duplicate_of_batch"] == rw.BATCH


def test_rejected_transactions_carry_their_cause(wh):
    pg = drilldown.rejected_page(wh, rw.BATCH)
    assert [(r["txn_id"], r["message_id"]) for r in pg.rows] == [("T1", "t-2"), ("T1", "t-3")]
    assert pg.rows[0]["cause"] == {"message_id": "t-dup", "reason": "duplicate", "dedup_key": "k-t-dup",
                                   "repeats": "m-parent", "repeats_batch": rw.PARENT}


def test_quarantine_pages_and_long_raw_lines(wh):
    pg = drilldown.quarantine_page(wh, rw.BATCH, 1, 50)
    assert pg.total == rw.QUARANTINED and pg.has_next and pg.rows[0]["raw_line"] == rw.HOSTILE_RAW
    assert pg.rows[1]["raw_line_chars"] == 9000 and len(pg.rows[1]["raw_line"]) == drilldown.MAX_RAW_LINE_CHARS
    last = drilldown.quarantine_page(wh, rw.BATCH, 2, 50)
    assert [r["line_number"] for r in last.rows] == list(range(1050, 1000 + rw.QUARANTINED)) and not last.has_next


def test_find_message(wh):
    m = drilldown.find_message(wh, rw.BATCH, "m-2")
    assert m["outcome"] == "delivered" and m["properties"] == {"_AMQ_DUPL_ID": "k-1"} and m["cache_seq"] == 31
    d = drilldown.find_message(wh, rw.BATCH, "d-000")
    assert d["outcome"] == "dropped" and d["reason"] == "duplicate" and d["duplicate_of_batch"] == rw.OLDER
    assert drilldown.find_message(wh, rw.BATCH, "nope") is None
    assert drilldown.find_message(wh, rw.PARENT, "m-1") is None  # no outputs at all: nothing, no error


def test_page_arguments_are_checked():
    assert drilldown.page_args() == (1, drilldown.DEFAULT_PAGE_SIZE)
    for page, size in (("0", None), ("x", None), (None, "0"), (None, str(drilldown.MAX_PAGE_SIZE + 1))):
        with pytest.raises(ValueError):
            drilldown.page_args(page, size)


def test_hostile_content_is_escaped_on_every_page(wh):
    pages = [
        render_dropped(rw.BATCH, drilldown.dropped_page(wh, rw.BATCH, 1, 500), None, None),
        render_dropped(rw.BATCH, drilldown.dropped_page(wh, rw.BATCH, 1, 5, address=rw.HOSTILE_ADDRESS),
                       None, rw.HOSTILE_ADDRESS),
        render_quarantine(rw.BATCH, drilldown.quarantine_page(wh, rw.BATCH)),
        render_rejected(rw.BATCH, drilldown.rejected_page(wh, rw.BATCH)),
        render_message(rw.BATCH, rw.HOSTILE_ID, drilldown.find_message(wh, rw.BATCH, rw.HOSTILE_ID)),
        render_message(rw.BATCH, rw.HOSTILE_DROPPED, drilldown.find_message(wh, rw.BATCH, rw.HOSTILE_DROPPED)),
        render_message(rw.BATCH, "<svg onload=alert(1)>", None),
        render_batch(reports.batch_report(wh, rw.BATCH)),
    ]
    for response in pages:
        html = response.body.decode()
        for raw in ("<script", "<b>m-html", "<i>orders", "<b>bad", "<svg onload", "<p>body"):
            assert raw not in html, (raw, html[:300])
    dropped, _, quarantine, _, message, dropped_message = (p.body.decode() for p in pages[:6])
    assert "&lt;script&gt;d-html&lt;/script&gt;" in dropped and "&lt;i&gt;orders&lt;/i&gt;" in dropped
    # the link to the message a duplicate repeats carries the id URL-encoded, then HTML-escaped
    assert "href='../2026-11-21T05/message?id=%3Cb%3Em-html%3C%2Fb%3E'" in dropped
    assert "&lt;script&gt;alert(&#x27;raw&#x27;)&lt;/script&gt;" in quarantine
    assert "&lt;p&gt;body of &lt;b&gt;m-html&lt;/b&gt;&lt;/p&gt;" in message
    assert "href='../2026-11-21T03/message?id=m-old'" in dropped and ">2026-11-21T03</a>" in dropped
    assert "duplicate of" in dropped_message and "%3Cb%3Em-html%3C%2Fb%3E" in dropped_message


def test_batch_page_links_to_the_drill_down(wh):
    html = render_batch(reports.batch_report(wh, rw.BATCH)).body.decode()
    for href in ("2026-11-21T05/dropped", "2026-11-21T05/dropped?reason=duplicate", "2026-11-21T05/rejected",
                 "2026-11-21T05/quarantine"):
        assert f"href='{href}'" in html, href
    assert f"dropped messages ({rw.DUPLICATES + 4})" in html
    # per address, the counts lead to that address's dropped messages (the address URL-encoded)
    assert "href='2026-11-21T05/dropped?reason=duplicate&amp;address=%3Ci%3Eorders%3C%2Fi%3E'" in html


def test_a_page_does_not_read_the_row_groups_before_it(tmp_path):
    """Row group 0 made unreadable (its column data overwritten, the footer intact): a later
    page still reads, which it could not if the rows before it were decoded and thrown away."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"n": list(range(100)), "s": [f"row {i}" * 20 for i in range(100)]}), path,
                   row_group_size=10)
    group = pq.ParquetFile(path).metadata.row_group(0)
    data = bytearray(path.read_bytes())
    for i in range(group.num_columns):
        column = group.column(i)
        start = column.data_page_offset
        data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    path.write_bytes(bytes(data))
    rows, has_more, total = drilldown.read_rows([str(path)], ["n", "s"], 50, 10)
    assert [r["n"] for r in rows] == list(range(50, 60)) and has_more and total == 100
    with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow raises for a corrupt page
        drilldown.read_rows([str(path)], ["n"], 0, 10)
