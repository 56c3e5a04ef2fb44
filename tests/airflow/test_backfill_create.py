"""How ``demo.backfill`` answers the API's refusals: the SQLite lock surfaces as a 503 (the create
itself), or as a 500 "Database error" when only the request's audit-log write met it, after the
handler had committed the backfill (seen in CI on December 2). The real API server cannot be made
to meet the lock on demand (the e2e tests meet it now and then), so these answers, as the API
server gave them, are replayed by a scripted stand-in for ``LocalAirflow.api``."""

from __future__ import annotations

import pytest

from msgdedup.orchestration import demo

DB_ERROR = {"detail": {"reason": "Database error", "statement": "hidden", "orig_error": "hidden",
                       "message": "Serious error when handling your request."}}
OURS = {"id": 7, "dag_id": "message_dedup", "from_date": "2026-11-20T02:00:00Z",
        "to_date": "2026-11-20T03:00:00Z", "completed_at": None}


class _ScriptedApi:
    def __init__(self, posts: list[tuple[int, dict]], listed: list[dict]) -> None:
        self.posts, self.listed, self.calls = list(posts), listed, []

    def token(self) -> str:
        return "t"

    def api(self, method: str, path: str, body=None, token=None):
        self.calls.append((method, path.split("?")[0]))
        if method == "POST":
            return self.posts.pop(0)
        if path.startswith("/api/v2/backfills"):
            return 200, {"backfills": self.listed}
        return 200, {"is_paused": True}  # the DAG: already paused, nothing to restore


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(demo.time, "sleep", lambda _: None)


def _create(api: _ScriptedApi) -> dict:
    return demo.backfill(api, "2026-11-20T02", "2026-11-20T03", say=lambda _: None)


def test_a_500_for_the_audit_log_takes_the_backfill_it_created():
    api = _ScriptedApi([(503, DB_ERROR), (500, DB_ERROR)], [OURS])
    assert _create(api)["id"] == 7
    assert [c for c in api.calls if c[0] == "POST"] == [("POST", "/api/v2/backfills")] * 2


def test_a_500_without_the_backfill_is_retried_and_another_backfill_is_not_taken():
    other = {**OURS, "id": 3, "from_date": "2026-11-19T00:00:00Z"}
    done = {**OURS, "id": 4, "completed_at": "2026-12-02T08:00:00Z"}
    api = _ScriptedApi([(500, DB_ERROR), (200, {**OURS, "id": 9})], [other, done])
    assert _create(api)["id"] == 9


def test_any_other_500_fails_at_once():
    api = _ScriptedApi([(500, {"detail": "boom"})], [OURS])
    with pytest.raises(demo.BackfillError, match="after 1 attempt"):
        _create(api)


class _PauseApi:
    """The DAG's pause state as the API server gave it back (CI, December 4): a PATCH answered 200
    and GETs after it that read the state before it for a while (``stale`` reads), or for good
    until the state is written again (``lost``: the first PATCH's write did not stick)."""

    def __init__(self, stale: int = 0, lost: bool = False) -> None:
        self.before = self.written = True  # paused
        self.stale, self.lost, self.patches = stale, lost, 0

    def token(self) -> str:
        return "t"

    def api(self, method: str, path: str, body=None, token=None):
        if method == "PATCH":
            self.patches += 1
            if not (self.lost and self.patches == 1):
                self.written = body["is_paused"]
            return 200, {"is_paused": body["is_paused"]}
        if self.stale:
            self.stale -= 1
            return 200, {"is_paused": self.before}
        return 200, {"is_paused": self.written}


@pytest.fixture
def _clock(monkeypatch):
    """Half a second passes at every reading of the clock (sleeps take none: ``_no_sleep``)."""
    ticks = iter(range(10_000))
    monkeypatch.setattr(demo.time, "monotonic", lambda: next(ticks) * 0.5)


def test_unpausing_waits_until_the_api_reads_the_dag_unpaused(_clock):
    api = _PauseApi(stale=3)
    demo.set_paused(api, False)
    assert api.patches == 1 and api.stale == 0  # it read the stale state three times, then the new one


def test_an_unpause_that_did_not_stick_is_written_again(_clock):
    api = _PauseApi(lost=True)
    demo.set_paused(api, False)
    assert api.patches == 2 and api.written is False


def test_a_state_that_never_reads_back_is_an_error(_clock):
    api = _PauseApi(stale=10_000)
    with pytest.raises(RuntimeError, match="still reads is_paused=True"):
        demo.set_paused(api, False)
