"""The "Data quality" web app mounted on the Airflow API server by ``plugins/data_quality.py``.

Airflow does not protect plugin endpoints, so every route here depends on :func:`require_user`:
it authenticates with Airflow's own security dependency (``get_user``: the JWT from the
``Authorization: Bearer`` header or the UI's ``_token`` cookie, validated by the configured auth
manager) and authorizes with the auth manager (the user must be allowed to read runs of the
``message_dedup`` DAG). No token or a bad one -> 401; authenticated but not allowed -> 403.

Routes (relative to the mount point ``/data-quality``):

- ``/``                       list of batches (HTML)
- ``/batches/<ID>``           one batch's report (HTML)
- ``/api/batches``            the list as JSON
- ``/api/batches/<ID>``       one batch's report as JSON
- ``/data-docs/<path>``       the GX Data Docs site written by the gate
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from msgdedup import reports
from msgdedup.orchestration import settings
from msgdedup.layout import BatchIdError, validate_batch_id
from msgdedup.orchestration.partitions import InvalidRunRequest, validate_root

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


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _status(word: str) -> str:
    cls = "ok" if word in ("passed", "yes", "published") else "bad" if word in ("failed", "stale", "outdated") else ""
    return f"<span class='{cls}'>{_e(word)}</span>"


def render_index(batches: list[dict[str, Any]], warehouse: Path) -> HTMLResponse:
    rows = [[
        f"<a href='batches/{_e(b['batch_id'])}'>{_e(b['batch_id'])}</a>",
        _e(b["delivered"]), _e(b["dropped"]), _e(b["quarantined"]),
        _status(b["gate"]), _status("published" if b["published"] else "no"),
        _status("stale") if b["stale"] else "",
    ] for b in batches]
    body = (
        "<h1>Data quality: message_dedup</h1>"
        f"<p>Warehouse <code>{_e(warehouse)}</code> — {len(batches)} batch(es). "
        "<a href='data-docs/index.html'>Great Expectations Data Docs</a></p>"
        + (_table(["batch", "delivered", "dropped", "quarantined", "gate", "published", ""], rows)
           if rows else "<p>No committed batch yet.</p>")
    )
    return _page("Data quality", body)


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
    parts.append("<h2>Dedup report</h2>")
    parts.append(_table(
        ["input lines", "delivered", "dropped", "duplicate", "transaction rejected", "quarantined"],
        [[_e(c["input_lines"]), _e(c["delivered"]), _e(c["dropped"]), _e(c["by_reason"].get("duplicate")),
          _e(c["by_reason"].get("transaction_rejected")), _e(c["quarantined"])]],
    ))
    parts.append("<h2>Per address</h2>")
    parts.append(_table(["address", "delivered", "duplicate", "transaction rejected"], [
        [_e(a["address"]), _e(a["delivered"]), _e(a["duplicate"]), _e(a["transaction_rejected"])]
        for a in r["by_address"]
    ]))
    parts.append("<h2>Duplicate-ID caches after this batch</h2>")
    parts.append(_table(["cache", "entries", "id_cache_size", "fill", "last seq"], [
        [_e(k["cache"]), _e(k["entries"]), _e(k["id_cache_size"]),
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
    if r["quarantine"]:
        parts.append(_table(["file", "line", "error", "raw line"], [
            [_e(Path(str(q.get("source_file") or "")).name), _e(q.get("line_number")), _e(q.get("error")),
             f"<code>{_e(q.get('raw_line'))}</code>"]
            for q in r["quarantine"]
        ]))
    else:
        parts.append("<p>None.</p>")
    return _page(f"Batch {r['batch_id']}", "".join(parts))


# ---------------------------------------------------------------- the app

def create_app() -> FastAPI:
    app = FastAPI(
        title="msgdedup data quality",
        dependencies=[Depends(require_user)],
        docs_url=None, redoc_url=None, openapi_url=None,
    )

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        warehouse = current_warehouse()
        return render_index(reports.list_batches(warehouse), warehouse)

    @app.get("/batches/{batch_id}", response_class=HTMLResponse)
    def batch_page(batch_id: str) -> HTMLResponse:
        return render_batch(reports.batch_report(current_warehouse(), _batch_or_404(batch_id)))

    @app.get("/api/batches")
    def batches_json() -> list[dict[str, Any]]:
        return reports.list_batches(current_warehouse())

    @app.get("/api/batches/{batch_id}")
    def batch_json(batch_id: str) -> dict[str, Any]:
        return reports.batch_report(current_warehouse(), _batch_or_404(batch_id))

    @app.get("/data-docs/{path:path}")
    def data_docs(path: str) -> FileResponse:
        root = (current_warehouse() / reports.DATA_DOCS_DIR).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            raise HTTPException(status_code=404, detail="no such Data Docs page")
        return FileResponse(target)

    return app
