"""The "Data quality" web app mounted on the Airflow API server by ``plugins/data_quality.py``.

Airflow does not protect plugin endpoints, so every route here depends on :func:`require_user`:
it authenticates with Airflow's own security dependency (``get_user``: the JWT from the
``Authorization: Bearer`` header or the UI's ``_token`` cookie, validated by the configured auth
manager) and authorizes with the auth manager (the user must be allowed to read runs of the
``message_dedup`` DAG). No token or a bad one -> 401; authenticated but not allowed -> 403.

Routes (relative to the mount point ``/data-quality``):

- ``/``                       list of batches with trends (HTML; ``?address=&from=&to=&limit=``)
- ``/api/trends``             the trend data as JSON (same parameters)
- ``/batches/<ID>/dropped``   its dropped messages, paged (``?page=&size=&reason=&address=``)
- ``/batches/<ID>/rejected``  its rejected transactions with the duplicate that caused each, paged
- ``/batches/<ID>/quarantine`` its quarantined lines, paged
- ``/batches/<ID>/message?id=`` one message (delivered or dropped) of the batch
- ``/api/batches/<ID>/{dropped,rejected,quarantine}`` the same lists as JSON
- ``/batches/<ID>``           one batch's report (HTML)
- ``/api/batches``            the list as JSON
- ``/api/batches/<ID>``       one batch's report as JSON
- ``/data-docs/<path>``       the GX Data Docs site written by the gate
"""

from __future__ import annotations

import html
import json
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from msgdedup import reports
from msgdedup.config import AUDIT_COVERAGE
from msgdedup.orchestration import settings
from msgdedup.layout import BatchIdError, validate_batch_id
from msgdedup.orchestration.partitions import InvalidRunRequest, validate_root
from msgdedup.review import charts, drilldown, trends

MOUNT_PATH = "/data-quality"
_bearer = HTTPBearer(auto_error=False)


async def require_user(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
) -> Any:
    """The logged-in Airflow user allowed to read message_dedup runs, else 401/403."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.core_api.security import get_user

    try:
        user = await get_user(request, None, credentials)
    except HTTPException as exc:
        raise HTTPException(
            status_code=401,
            detail=f"log in to Airflow first ({exc.detail})",
            headers={"WWW-Authenticate": "Bearer"},
        ) from None
    allowed = get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails(id=settings.DAG_ID), user=user
    )
    if not allowed:
        raise HTTPException(status_code=403, detail=f"not allowed to read runs of {settings.DAG_ID}")
    return user


def current_warehouse() -> Path:
    """The warehouse Variable (read through the API server's metadata DB), validated."""
    # Server-side code: the API server reads the metadata DB itself; airflow.sdk.Variable needs a
    # task supervisor, which the API server does not have.
    from airflow.models import Variable

    value = Variable.get(settings.VAR_WAREHOUSE, default_var=settings.default_warehouse())  # noqa: AIR311
    try:
        return Path(validate_root(str(value), "warehouse"))
    except InvalidRunRequest as exc:
        raise HTTPException(status_code=500, detail=str(exc)) from None


def _trend_filter(address: str | None, since: str | None, until: str | None, limit: str | None) -> trends.TrendFilter:
    try:
        return trends.TrendFilter.parse(address, since, until, limit)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


def _drill(reader: Any, batch_id: str, page: str | None, size: str | None, **kwargs: Any) -> drilldown.Page:
    """A drill-down page: bad paging or filters -> 400, a bad batch id -> 404."""
    batch_id = _batch_or_404(batch_id)
    try:
        number, n = drilldown.page_args(page, size)
        return reader(current_warehouse(), batch_id, number, n, **kwargs)
    except BatchIdError:
        raise HTTPException(status_code=404, detail="no such batch") from None
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


def _batch_or_404(batch_id: str) -> str:
    try:
        return validate_batch_id(batch_id)
    except BatchIdError:
        raise HTTPException(status_code=404, detail="no such batch") from None


# ---------------------------------------------------------------- HTML rendering (all escaped)

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.2rem;color:#1a202c}
table{border-collapse:collapse;margin:.5rem 0 1.2rem}
td,th{border:1px solid #cbd5e0;padding:.25rem .6rem;text-align:left;font-size:.9rem}
th{background:#edf2f7} .ok{color:#276749;font-weight:600} .bad{color:#c53030;font-weight:600}
code{font-size:.85rem;word-break:break-all} h1{font-size:1.4rem} h2{font-size:1.1rem;margin-top:1.4rem}
h3{font-size:1rem;margin:.8rem 0 .1rem} h3 small{font-weight:400;color:#4a5568}
.note{margin:.1rem 0;color:#4a5568;font-size:.85rem}
tr.stale td{background:#fff5f5} tr.unpublished td{background:#fffaf0} b.stale{color:#c53030} b.unpub{color:#dd6b20}
.alert{background:#fffaf0;border:1px solid #dd6b20;padding:.4rem .6rem} form.filter{margin:.6rem 0}
.pager a,.pager span{margin-right:.8rem} nav.drill{margin:.6rem 0;padding:.4rem .6rem;background:#ebf8ff}
table.kv th{width:9rem;vertical-align:top} .nowrap{white-space:nowrap}
pre{white-space:pre-wrap;word-break:break-all;font-size:.85rem;margin:0}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _u(path: str) -> str:
    """A relative path as an escaped URL (quoted: Data Docs file names may hold ':' or '%')."""
    return html.escape(quote(path, safe="/"))


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )


def _table(headers: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(f"<tr class='{_e(cls)}'>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                   for row, cls in zip(rows, classes or [""] * len(rows), strict=True))
    return f"<table><tr>{head}</tr>{body}</table>"


def _status(word: str) -> str:
    cls = "ok" if word in ("passed", "yes", "published") else "bad" if word in ("failed", "stale", "outdated") else ""
    return f"<span class='{cls}'>{_e(word)}</span>"


def _pct(v: float) -> str:
    return f"{v:g} %"


def _int(v: float) -> str:
    return f"{v:g}"


def _filter_form(t: dict[str, Any]) -> str:
    flt = t["filter"]
    options = "".join(
        f"<option value='{_e(a)}'{' selected' if a == flt.address else ''}>{_e(a)}</option>" for a in t["addresses"])
    return (
        "<form method='get' action='' class='filter' aria-label='Filter batches'>"
        f"<label>address <select name='address'><option value=''>all addresses</option>{options}</select></label> "
        f"<label>from <input type='date' name='from' value='{_e(flt.since or '')}'></label> "
        f"<label>to <input type='date' name='to' value='{_e(flt.until or '')}'></label> "
        f"<label>at most <input type='number' name='limit' min='1' max='{trends.MAX_LIMIT}' value='{flt.limit}' "
        "style='width:5rem'> batches</label> <button type='submit'>Show</button> <a href='./'>reset</a></form>"
    )


def _batch_links(batch_ids: list[str], most: int = 12) -> str:
    """The newest ``most`` of ``batch_ids`` as links (the table below lists all of them)."""
    newest = batch_ids[::-1][:most]
    more = f" and {len(batch_ids) - most} older" if len(batch_ids) > most else ""
    return ", ".join(f"<a href='batches/{_e(b)}'>{_e(b)}</a>" for b in newest) + more


def render_index(t: dict[str, Any], warehouse: Path) -> HTMLResponse:
    """The batch list: filter form, trend charts (oldest left), caches fullest first, and the
    batches newest first; stale and unpublished batches marked in words as well as in colour."""
    points, flt = t["points"], t["filter"]
    scope = f"address <code>{_e(flt.address)}</code>" if flt.address else "all addresses"
    parts = [
        "<h1>Data quality: message_dedup</h1>",
        f"<p>Warehouse <code>{_e(warehouse)}</code> — {t['batches_in_warehouse']} batch(es). "
        "<a href='data-docs/index.html'>Great Expectations Data Docs</a></p>",
        _filter_form(t),
    ]
    if not points:
        parts.append("<p>No committed batch yet.</p>" if not t["batches_in_warehouse"]
                     else "<p>No batch matches this filter.</p>")
        return _page("Data quality", "".join(parts))
    stale = [p["batch_id"] for p in points if p["stale"]]
    unpublished = [p["batch_id"] for p in points if charts.state_of(p) == "unpublished"]
    shown = f"{len(points)} batch(es) from {_e(points[0]['batch_id'])} to {_e(points[-1]['batch_id'])}, {scope}"
    if t["truncated"]:
        shown += f" (the newest {flt.limit}; raise “at most” or narrow the dates for more)"
    parts.append(f"<h2>Trends</h2><p>{shown}. Each bar is a batch (oldest left); click one to open it. "
                 "<span class='legend'><b class='stale'>S</b> = stale (hatched red), "
                 "<b class='unpub'>U</b> = not published (hatched orange); a red or orange tick when bars are "
                 "too narrow for a letter.</span></p>")
    if stale or unpublished:
        alert = []
        if stale:
            alert.append(f"<b>{len(stale)} stale</b> (re-run them): " + _batch_links(stale))
        if unpublished:
            alert.append(f"<b>{len(unpublished)} not published</b>: " + _batch_links(unpublished))
        parts.append("<p class='alert' role='alert'>⚠ " + "; ".join(alert) + "</p>")

    def href(p: dict[str, Any]) -> str:
        return f"batches/{p['batch_id']}"

    metrics = [
        ("dup-rate", "Duplicate rate", lambda p: p["duplicate_rate_pct"], _pct,
         "duplicates / valid messages (delivered + dropped)"),
        ("rejected", "Transactions rejected (messages)", lambda p: p["transaction_rejected"], _int,
         "messages dropped because their transaction held a duplicate"),
        ("quarantined", "Quarantined lines", lambda p: p["quarantined"], _int,
         "whole batch: a bad line has no trusted address" if flt.address else "lines that could not be used"),
        ("window-misses", "Window misses", lambda p: p["window_misses"], _int,
         "resends delivered because their key had left a too-small window (the window-miss audit)"),
    ]
    for key, title, value, fmt, note in metrics:
        parts.append(f"<section class='trend' id='trend-{key}'><h3>{_e(title)} <small>— "
                     f"{_e(charts.headline(points, value, fmt))}</small></h3><p class='note'>{_e(note)}</p>"
                     f"{charts.bar_chart(key, title, points, value, fmt, href)}</section>")
    gates: dict[str, int] = {}
    for p in points:
        gates[p["gate"]] = gates.get(p["gate"], 0) + 1
    parts.append("<section class='trend' id='trend-gate'><h3>Gate result <small>— "
                 + _e(" · ".join(f"{n} {g}" for g, n in sorted(gates.items())))
                 + "</small></h3><p class='note'>✓ passed, ✗ failed, ! outdated (checked another run), – not run</p>"
                 + charts.gate_strip(points, href) + "</section>")
    parts.append("<h2>Duplicate-ID caches, fullest first</h2>")
    parts.append("<p class='note'>Fill = entries / id_cache_size after the newest batch shown. A full cache "
                 "forgets its oldest keys: a repeat of one is delivered again.</p>")
    cache_headers = ["cache", "address", "window", "fill (newest batch)", "entries", "id_cache_size",
                     "fill over the batches shown", "window misses", "recommended window"]
    parts.append(_table(cache_headers, [
        [_e(c["cache"]), _e(c["address"]), _e(c["window"]), charts.fill_bar(c["latest_fill_pct"]), _e(c["entries"]),
         _e("-" if c["id_cache_size"] is None else c["id_cache_size"]), charts.sparkline(c["series"]),
         f"<b class='stale'>{_e(c['window_misses'])}</b>" if c["window_misses"] else "0",
         _flagged(c["recommended"] or "-", c["too_small"])]
        for c in t["caches"]
    ]) if t["caches"] else "<p>No cache.</p>")
    parts.append("<h2>Batches, newest first</h2>")
    rows, classes = [], []
    for p in reversed(points):
        state = charts.state_of(p)
        classes.append("" if state == "ok" else state)
        rows.append([
            f"<a href='batches/{_e(p['batch_id'])}'>{_e(p['batch_id'])}</a>",
            _e(p["delivered"]), _e(p["duplicate"]),
            _e("-" if p["duplicate_rate_pct"] is None else _pct(p["duplicate_rate_pct"])),
            _e(p["transaction_rejected"]), _e(p["quarantined"]), _status(p["gate"]),
            _status("published" if p["published"] else "no"),
            "" if state == "ok" else f"<span class='bad'>⚠ {_e(charts.STATE_WORDS[state])}</span>",
        ])
    parts.append(_table(["batch", "delivered", "duplicates", "duplicate rate", "txn rejected", "quarantined",
                         "gate", "published", "state"], rows, classes))
    return _page("Data quality", "".join(parts))


def render_batch(r: dict[str, Any]) -> HTMLResponse:
    c = r["counts"]
    parts = [f"<p><a href='../'>&larr; all batches</a></p><h1>Batch {_e(r['batch_id'])}</h1>"]
    if not r["committed"]:
        parts.append("<p class='bad'>Not committed (no manifest).</p>")
    if r["stale"]:
        parts.append("<p class='bad'>Stale: an older batch was reprocessed; re-run this one.</p>")
    parts.append(
        f"<p>engine run <code>{_e(r['run_id'])}</code>, committed {_e(r['committed_at'])}; published: "
        + (f"<span class='ok'>yes</span> at {_e(r['published']['published_at'])} (run "
           f"<code>{_e(r['published'].get('run_id'))}</code>)" if r["published"] else "no")
        + "</p>"
    )
    parts.append(_drilldown_links(r))
    parts.append(_window_audit(r))
    parts.append("<h2>Dedup report</h2>")
    parts.append(_table(
        ["input lines", "delivered", "dropped", "duplicate", "transaction rejected", "quarantined"],
        [[_e(c["input_lines"]), _e(c["delivered"]), _e(c["dropped"]), _e(c["by_reason"].get("duplicate")),
          _e(c["by_reason"].get("transaction_rejected")), _e(c["quarantined"])]],
    ))
    parts.append("<h2>Per address</h2>")
    def dropped_of(address: str, reason: str, count: Any) -> str:
        if not count or not r["committed"]:
            return _e(count)
        href = f"{r['batch_id']}/dropped{_qs({'reason': reason, 'address': address})}"
        return f"<a href='{_e(href)}'>{_e(count)}</a>"

    parts.append(_table(["address", "delivered", "duplicate", "transaction rejected"], [
        [_e(a["address"]), _e(a["delivered"]), dropped_of(a["address"], "duplicate", a["duplicate"]),
         dropped_of(a["address"], "transaction_rejected", a["transaction_rejected"])]
        for a in r["by_address"]
    ]))
    parts.append("<h2>Duplicate-ID caches after this batch</h2>")
    parts.append(_table(["cache", "window", "entries", "id_cache_size", "fill", "last seq"], [
        [_e(k["cache"]), _e(k["window"]), _e(k["entries"]), _e(k["id_cache_size"] or "-"),
         _e("-" if k["fill_pct"] is None else f"{k['fill_pct']}%"), _e(k["last_seq"])]
        for k in r["caches"]
    ]))
    gate = r["gate"]
    parts.append("<h2>Quality gate (Great Expectations)</h2>")
    if gate is None:
        parts.append("<p>The gate has not run for this batch.</p>")
    else:
        docs = f" — <a href='../data-docs/{_u(gate['data_docs'])}'>Data Docs</a>" if gate["data_docs"] else ""
        parts.append(f"<p>Result: {_status(gate['status'])} (checked {_e(gate['checked_at'])}, run "
                     f"<code>{_e(gate['run_id'])}</code>){docs}</p>")
        parts.append(_table(["suite", "expectation", "column", "result", "observed"], [
            [_e(x["suite"]),
             (f"<a href='../data-docs/{_u(x['data_docs'])}'>{_e(x['expectation'])}</a>" if x["data_docs"]
              else _e(x["expectation"])),
             _e(x["column"]), _status("passed" if x["success"] else "failed"),
             f"<code>{_e(json.dumps(x['observed'], sort_keys=True))}</code>"]
            for x in gate["expectations"]
        ]))
    parts.append(f"<h2>Quarantined lines (first {_e(r['quarantine_limit'])})</h2>")
    if c["quarantined"]:
        parts.append(f"<p><a href='{_e(r['batch_id'])}/quarantine'>All {_e(c['quarantined'])} quarantined "
                     "lines, paged &rarr;</a></p>")
    if r["quarantine"]:
        parts.append(_table(["file", "line", "error", "raw line"], [
            [_e(Path(str(q.get("source_file") or "")).name), _e(q.get("line_number")), _e(q.get("error")),
             f"<code>{_e(q.get('raw_line'))}</code>"]
            for q in r["quarantine"]
        ]))
    else:
        parts.append("<p>None.</p>")
    return _page(f"Batch {r['batch_id']}", "".join(parts))


def _drilldown_links(r: dict[str, Any]) -> str:
    """The batch page's way to the messages behind its numbers."""
    c, b = r["counts"], _e(r["batch_id"])
    if not r["committed"]:
        return ""
    reasons = c["by_reason"]
    links = [
        f"<a href='{b}/dropped'>dropped messages ({_e(c['dropped'])})</a>",
        f"<a href='{b}/dropped?reason=duplicate'>duplicates ({_e(reasons.get('duplicate', 0))})</a>",
        f"<a href='{b}/rejected'>rejected transactions ({_e(reasons.get('transaction_rejected', 0))} messages)</a>",
        f"<a href='{b}/quarantine'>quarantined lines ({_e(c['quarantined'])})</a>",
    ]
    return "<nav class='drill' aria-label='Drill down'><b>Drill down:</b> " + " · ".join(links) + "</nav>"


def _flagged(text: Any, too_small: bool) -> str:
    """A recommended window, bold when the current one is smaller (escaped)."""
    return f"<b>{_e(text)}</b>" if too_small else _e(text)


def _window_audit(r: dict[str, Any]) -> str:
    """The window-miss audit (docs/semantics.md §9): per cache, the keys delivered again only
    because they had left the window, and the window (id_cache_size or duplicate_window) that
    would have caught 99% of them. Caches with misses first, the most first; a cache whose window
    is too small stands out. Says how far the audit looked back, and when it was off."""
    if not r["committed"]:
        return ""
    head, audit, horizon = "<h2>Window-miss audit</h2>", r.get("window_audit"), r["audit_horizon"]
    if horizon == 0:
        return head + ("<p>The window-miss audit is off for this batch (window_audit: horizon: 0 in the "
                       "config).</p>")
    if audit is None:
        return head + "<p>Not recorded: this batch was committed before the engine kept the audit.</p>"
    reach = (f"the audit looks back {1 + horizon} windows per cache: its window and {horizon} more, "
             f"<code>window_audit: horizon: {_e(horizon)}</code>")
    caches = sorted(audit.items(), key=lambda item: (-item[1]["misses"], item[0]))
    missed = [(name, a, reports.audit_finding(a)) for name, a in caches if a["misses"]]
    if not missed:
        return head + ("<p>No key was delivered again after leaving its window "
                       f"({len(caches)} cache(s) checked; {reach}): every window was big enough for this "
                       "batch.</p>")
    rows = [[f"<code>{_e(name)}</code>", _e(a.get("address", "")), _e(a["misses"]), _e(f["largest_miss"]),
             f"<code>{_e(f['setting'])}</code>", _e(f["current"]), _flagged(f["recommended"], f["too_small"])]
            for name, a, f in missed]
    classes = ["unpublished" if f["too_small"] else "" for _, _, f in missed]
    return (head + f"<p>{sum(a['misses'] for _, a, _ in missed)} message(s) were delivered although their key "
            f"had been accepted before on the same cache and had left its window since ({reach}). "
            f"Recommended: the <code>id_cache_size</code> (count windows) or <code>duplicate_window</code> "
            f"(time windows) that would have held {AUDIT_COVERAGE:.0%} of them.</p>"
            + _table(["cache", "address", "window misses", "largest miss", "setting", "current", "recommended"],
                     rows, classes))


# ---------------------------------------------------------------- drill-down pages

def _qs(params: dict[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return ("?" + urlencode(kept)) if kept else ""


def _msg_link(batch_id: str | None, message_id: str | None, current: str) -> str:
    """A link to a message's page, from a drill-down page of batch ``current``."""
    if not message_id:
        return ""
    target = batch_id or current
    href = f"../{target}/message{_qs({'id': message_id})}"
    return f"<a href='{_e(href)}'><code>{_e(message_id)}</code></a>"


def _batch_link(batch_id: str | None, current: str) -> str:
    if not batch_id:
        return ""
    if batch_id == current:
        return "this batch"
    return f"<a href='../{_e(batch_id)}'>{_e(batch_id)}</a>"


def _pager(pg: drilldown.Page, params: dict[str, Any]) -> str:
    last = pg.first_row + len(pg.rows) - 1
    of = f" of {pg.total}" if pg.total is not None else ""
    parts = [f"<span>rows {pg.first_row if pg.rows else 0}–{last if pg.rows else 0}{of}</span>"]
    if pg.number > 1:
        parts.append(f"<a rel='prev' href='{_e(_qs({**params, 'page': pg.number - 1, 'size': pg.size}))}'>"
                     "&larr; previous</a>")
    parts.append(f"<span>page {pg.number}" + (f" of {pg.pages}" if pg.pages else "") + "</span>")
    if pg.has_next:
        parts.append(f"<a rel='next' href='{_e(_qs({**params, 'page': pg.number + 1, 'size': pg.size}))}'>"
                     "next &rarr;</a>")
    return "<p class='pager'>" + "".join(parts) + "</p>"


def _drill_page(batch_id: str, title: str, intro: str, body: str) -> HTMLResponse:
    head = (f"<p><a href='../../'>&larr; all batches</a> · <a href='../{_e(batch_id)}'>&larr; batch "
            f"{_e(batch_id)}</a></p><h1>{_e(title)}</h1><p>{intro}</p>")
    return _page(title, head + body)


def _when(value: Any) -> str:
    """A timestamp as ``2026-11-20 00:03:57.321`` (+ offset when it has one), kept on one line."""
    if isinstance(value, datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + (value.strftime(" %z") if value.tzinfo else "")
        return f"<span class='nowrap'>{_e(text)}</span>"
    return _e(value)


def render_dropped(batch_id: str, pg: drilldown.Page, reason: str | None, address: str | None) -> HTMLResponse:
    params = {"reason": reason, "address": address}
    filters = " · ".join(
        f"<b>{_e(label)}</b>" if value == reason else f"<a href='{_e(_qs({'reason': value, 'address': address}))}'>"
        f"{_e(label)}</a>"
        for value, label in ((None, "all"), ("duplicate", "duplicates"), ("transaction_rejected", "rejected")))
    intro = (f"Messages of batch {_e(batch_id)} that were not delivered" +
             (f", address <code>{_e(address)}</code>" if address else "") + f". Show: {filters}. "
             "<i>duplicate of</i> is the delivered message a duplicate repeats (for a rejected one: the "
             "duplicate in its transaction).")
    rows = [[
        _msg_link(batch_id, r.get("message_id"), batch_id), _e(r.get("address")), _when(r.get("received_at")),
        _e(r.get("reason")),
        _msg_link(r.get("duplicate_of_batch"), r.get("duplicate_of"), batch_id),
        # a rejected message's duplicate_of is the (dropped) duplicate of its transaction, not a delivery
        _batch_link(r.get("duplicate_of_batch"), batch_id) if r.get("reason") == "duplicate" else "–",
        _e(r.get("txn_id")), f"<code>{_e(r.get('dedup_key'))}</code>",
        f"{_e(Path(str(r.get('source_file') or '')).name)}:{_e(r.get('line_number'))}",
    ] for r in pg.rows]
    body = _pager(pg, params) + (_table(
        ["message", "address", "received at", "reason", "duplicate of", "delivered in", "transaction",
         "dedup key", "file:line"], rows) if rows else "<p>None.</p>")
    return _drill_page(batch_id, f"Dropped messages: batch {batch_id}", intro, body)


def render_quarantine(batch_id: str, pg: drilldown.Page) -> HTMLResponse:
    rows = []
    for q in pg.rows:
        raw = f"<pre>{_e(q.get('raw_line'))}</pre>"
        if (q.get("raw_line_chars") or 0) > drilldown.MAX_RAW_LINE_CHARS:
            raw += (f"<span class='note'>(first {drilldown.MAX_RAW_LINE_CHARS} of {q['raw_line_chars']} "
                    "characters)</span>")
        rows.append([_e(q.get("error")), f"<code>{_e(q.get('source_file'))}</code>", _e(q.get("line_number")), raw])
    intro = (f"Lines of batch {_e(batch_id)} that could not be used: not valid JSON, a missing or bad field, or "
             "a repeated message_id. The raw line is shown as text, exactly as read.")
    body = _pager(pg, {}) + (_table(["error", "file", "line", "raw line"], rows) if rows else "<p>None.</p>")
    return _drill_page(batch_id, f"Quarantined lines: batch {batch_id}", intro, body)


def render_rejected(batch_id: str, pg: drilldown.Page) -> HTMLResponse:
    rows = []
    for r in pg.rows:
        cause = r["cause"]
        repeats = ""
        if cause.get("repeats"):
            link = _msg_link(cause.get("repeats_batch"), cause["repeats"], batch_id)
            repeats = (f"{_e(cause.get('reason'))} of {link}"
                       f" (delivered in {_batch_link(cause.get('repeats_batch'), batch_id)})")
        rows.append([
            _e(r.get("txn_id")), _msg_link(batch_id, r.get("message_id"), batch_id), _e(r.get("address")),
            _when(r.get("received_at")), _msg_link(batch_id, cause.get("message_id"), batch_id), repeats,
        ])
    intro = (f"Messages of batch {_e(batch_id)} dropped because another message of their transaction was a "
             "duplicate: a transaction is delivered whole or not at all. <i>Caused by</i> is that duplicate.")
    body = _pager(pg, {}) + (_table(
        ["transaction", "rejected message", "address", "received at", "caused by", "which is a"], rows)
        if rows else "<p>None.</p>")
    return _drill_page(batch_id, f"Rejected transactions: batch {batch_id}", intro, body)


def render_message(batch_id: str, message_id: str, m: dict[str, Any] | None) -> HTMLResponse:
    title = f"Message {message_id}"
    if m is None:
        body = (f"<p class='bad'>Batch {_e(batch_id)} delivered or dropped no message with this id "
                f"(<code>{_e(message_id)}</code>).</p>")
        return _drill_page(batch_id, title, f"in batch {_e(batch_id)}", body)
    outcome = m["outcome"] + (f" ({m['reason']})" if m.get("reason") else "")
    fields = [
        ("outcome", _status("passed" if m["outcome"] == "delivered" else "failed").replace(
            ">passed<", ">delivered<").replace(">failed<", f">{_e(outcome)}<")),
        ("address", _e(m.get("address"))), ("received at", _when(m.get("received_at"))),
        ("transaction", _e(m.get("txn_id"))), ("source", f"{_e(m.get('source_id'))} seq {_e(m.get('seq'))}"),
        ("cache", _e(m.get("cache"))), ("dedup key", f"<code>{_e(m.get('dedup_key'))}</code>"),
        ("cache seq", _e(m.get("cache_seq"))),
        ("file:line", f"<code>{_e(m.get('source_file'))}</code>:{_e(m.get('line_number'))}"),
    ]
    if m.get("duplicate_of"):
        fields.append(("duplicate of", _msg_link(m.get("duplicate_of_batch"), m["duplicate_of"], batch_id)
                       + f" (in {_batch_link(m.get('duplicate_of_batch'), batch_id)})"))
    props = m.get("properties") or {}
    fields.append(("properties", _table(["name", "value"], [[_e(k), f"<code>{_e(v)}</code>"]
                                                              for k, v in sorted(props.items())]) if props else ""))
    body_text = f"<pre>{_e(m.get('body'))}</pre>"
    if (m.get("body_chars") or 0) > drilldown.MAX_BODY_CHARS:
        body_text += f"<span class='note'>(first {drilldown.MAX_BODY_CHARS} of {m['body_chars']} characters)</span>"
    fields.append(("body", body_text))
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in fields)
    return _drill_page(batch_id, title, f"in batch {_e(batch_id)}", f"<table class='kv'>{rows}</table>")


# ---------------------------------------------------------------- the app

def create_app() -> FastAPI:
    app = FastAPI(
        title="msgdedup data quality",
        dependencies=[Depends(require_user)],
        docs_url=None, redoc_url=None, openapi_url=None,
    )

    @app.get("/", response_class=HTMLResponse)
    def index(address: str | None = None, since: str | None = Query(None, alias="from"),
              until: str | None = Query(None, alias="to"), limit: str | None = None) -> HTMLResponse:
        warehouse = current_warehouse()
        return render_index(trends.trends(warehouse, _trend_filter(address, since, until, limit)), warehouse)

    @app.get("/api/trends")
    def trends_json(address: str | None = None, since: str | None = Query(None, alias="from"),
                    until: str | None = Query(None, alias="to"), limit: str | None = None) -> dict[str, Any]:
        t = trends.trends(current_warehouse(), _trend_filter(address, since, until, limit))
        flt = t["filter"]
        return {**t, "filter": {"address": flt.address, "from": flt.since, "to": flt.until, "limit": flt.limit}}

    @app.get("/batches/{batch_id}", response_class=HTMLResponse)
    def batch_page(batch_id: str) -> HTMLResponse:
        return render_batch(reports.batch_report(current_warehouse(), _batch_or_404(batch_id)))

    @app.get("/api/batches")
    def batches_json() -> list[dict[str, Any]]:
        return reports.list_batches(current_warehouse())

    @app.get("/api/batches/{batch_id}")
    def batch_json(batch_id: str) -> dict[str, Any]:
        return reports.batch_report(current_warehouse(), _batch_or_404(batch_id))

    @app.get("/batches/{batch_id}/dropped", response_class=HTMLResponse)
    def dropped_page(batch_id: str, page: str | None = None, size: str | None = None,
                     reason: str | None = None, address: str | None = None) -> HTMLResponse:
        pg = _drill(drilldown.dropped_page, batch_id, page, size, reason=reason or None, address=address or None)
        return render_dropped(batch_id, pg, reason or None, address or None)

    @app.get("/batches/{batch_id}/quarantine", response_class=HTMLResponse)
    def quarantine_page(batch_id: str, page: str | None = None, size: str | None = None) -> HTMLResponse:
        return render_quarantine(batch_id, _drill(drilldown.quarantine_page, batch_id, page, size))

    @app.get("/batches/{batch_id}/rejected", response_class=HTMLResponse)
    def rejected_page(batch_id: str, page: str | None = None, size: str | None = None) -> HTMLResponse:
        return render_rejected(batch_id, _drill(drilldown.rejected_page, batch_id, page, size))

    @app.get("/batches/{batch_id}/message", response_class=HTMLResponse)
    def message_page(batch_id: str, id: str = Query(..., min_length=1, max_length=1000)) -> HTMLResponse:
        message = drilldown.find_message(current_warehouse(), _batch_or_404(batch_id), id)
        response = render_message(batch_id, id, message)
        if message is None:
            response.status_code = 404
        return response

    @app.get("/api/batches/{batch_id}/{kind}")
    def drill_json(batch_id: str, kind: str, page: str | None = None, size: str | None = None,
                   reason: str | None = None, address: str | None = None) -> dict[str, Any]:
        readers = {"dropped": drilldown.dropped_page, "quarantine": drilldown.quarantine_page,
                   "rejected": drilldown.rejected_page}
        if kind not in readers:
            raise HTTPException(status_code=404, detail="no such list")
        extra = {"reason": reason or None, "address": address or None} if kind == "dropped" else {}
        pg = _drill(readers[kind], batch_id, page, size, **extra)
        return {"rows": pg.rows, "page": pg.number, "size": pg.size, "total": pg.total, "has_next": pg.has_next}

    @app.get("/data-docs/{path:path}")
    def data_docs(path: str) -> FileResponse:
        root = (current_warehouse() / reports.DATA_DOCS_DIR).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            raise HTTPException(status_code=404, detail="no such Data Docs page")
        return FileResponse(target)

    return app
