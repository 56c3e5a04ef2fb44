"""Every route of the Data quality app behind Airflow's login and permission, in process: the
real app, Airflow's real auth manager (SimpleAuthManager, the project's) and JWTs it signed,
a migrated SQLite metadata DB (token revocation is checked there), and the warehouse Variable
given the way Airflow reads Variables from the environment (``AIRFLOW_VAR_<NAME>``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from msgdedup.orchestration import settings

from tests.airflow import review_warehouse as rw

B = rw.BATCH
ROUTES = [
    "/", "/?address=orders.eu&from=2026-11-21&to=2026-11-21", "/api/batches", "/api/trends",
    f"/batches/{B}", f"/api/batches/{B}",
    f"/batches/{B}/dropped", f"/batches/{B}/dropped?reason=duplicate&page=2&size=10",
    f"/batches/{B}/rejected", f"/batches/{B}/quarantine?page=2", f"/batches/{B}/message?id=m-1",
    f"/api/batches/{B}/dropped", f"/api/batches/{B}/rejected", f"/api/batches/{B}/quarantine",
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """The plugin's app with a test client; (client, tokens by role)."""
    from fastapi.testclient import TestClient

    # The metadata DB of this session's AIRFLOW_HOME (tests/airflow/conftest.py), migrated once.
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   capture_output=True, env=dict(os.environ))
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from msgdedup.orchestration.quality_view import create_app

    manager = init_auth_manager()
    tokens = {role: manager.generate_jwt(SimpleAuthManagerUser(username=f"u-{role}", role=role))
              for role in ("viewer", "admin")}
    tokens["no role"] = manager.generate_jwt(SimpleAuthManagerUser(username="nobody", role=None))
    wh = rw.build(tmp_path_factory.mktemp("routes-wh"))
    variable = f"AIRFLOW_VAR_{settings.VAR_WAREHOUSE.upper()}"
    old = os.environ.get(variable)
    os.environ[variable] = str(wh)
    try:
        yield TestClient(create_app()), tokens
    finally:
        if old is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = old


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_needs_a_login(client, path):
    c, _ = client
    assert c.get(path).status_code == 401
    assert c.get(path, headers={"Authorization": "Bearer not-a-jwt"}).status_code == 401


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_needs_the_permission(client, path):
    c, tokens = client
    response = c.get(path, headers={"Authorization": f"Bearer {tokens['no role']}"})
    assert response.status_code == 403, response.text


@pytest.mark.parametrize("path", ROUTES)
def test_a_user_who_may_read_runs_sees_every_route(client, path):
    from fastapi.testclient import TestClient

    c, tokens = client
    browser = TestClient(c.app, cookies={"_token": tokens["viewer"]})  # the UI's session cookie
    response = browser.get(path)
    assert response.status_code == 200, response.text


def test_hostile_content_is_escaped_over_http(client):
    c, tokens = client
    auth = {"Authorization": f"Bearer {tokens['admin']}"}
    quarantine = c.get(f"/batches/{B}/quarantine", headers=auth).text
    assert "<script>alert" not in quarantine and "&lt;script&gt;alert(&#x27;raw&#x27;)&lt;/script&gt;" in quarantine
    dropped = c.get(f"/batches/{B}/dropped", params={"address": rw.HOSTILE_ADDRESS}, headers=auth).text
    assert "<script>d-html" not in dropped and "<i>orders" not in dropped
    assert "&lt;script&gt;d-html&lt;/script&gt;" in dropped and "&lt;i&gt;orders&lt;/i&gt;" in dropped
    message = c.get(f"/batches/{B}/message", params={"id": rw.HOSTILE_ID}, headers=auth)
    assert message.status_code == 200 and "<b>m-html" not in message.text and "&lt;b&gt;m-html" in message.text
    assert message.headers["content-type"].startswith("text/html")


def test_bad_requests_are_refused_plainly(client):
    c, tokens = client
    auth = {"Authorization": f"Bearer {tokens['admin']}"}
    assert c.get("/?from=yesterday", headers=auth).status_code == 400
    assert c.get(f"/batches/{B}/dropped?page=0", headers=auth).status_code == 400
    assert c.get(f"/batches/{B}/dropped?reason=<x>", headers=auth).status_code == 400
    assert c.get("/batches/..%2Fetc/dropped", headers=auth).status_code == 404
    assert c.get(f"/batches/{B}/message?id=missing", headers=auth).status_code == 404
    assert c.get(f"/api/batches/{B}/delivered", headers=auth).status_code == 404
    page = c.get(f"/api/batches/{B}/dropped?reason=transaction_rejected", headers=auth).json()
    assert [r["message_id"] for r in page["rows"]] == ["t-2", "t-3"] and page["total"] == 2
