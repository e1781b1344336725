"""The archive's search index (issue 9, docs/archive.md "Migration 7", SQLite and PostgreSQL): the `error`, `body`
and `header.NAME` filters answered through the trigram index stay exactly what a reading of the
published messages says while the background indexer is off (every record above its watermark,
scanned), after it resumed across kill -9 restarts (one of them while it indexes in small
batches: nothing missed, nothing indexed twice), after PUT edits of bodies and headers, after
deletes, and for a burst of records queried before the indexer reached them."""

import base64
import time

import pytest

import conftest
from archive_helpers import Api, config_for
from test_dead_letter_archive_filters import CASES, check, message, publish_all

pytestmark = pytest.mark.charon_only

N = 60


def index_state(api):
    status, body = api.get("/api/dead-letters/stats")
    assert status == 200, body
    return body["search_index"]


def wait_caught_up(api, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            s = index_state(api)
            if s["caught_up"]:
                return s
        except Exception:  # the broker may still be starting
            pass
        time.sleep(0.2)
    raise AssertionError(f"search index not caught up within {timeout}s: {index_state(api)}")


def ids_of(api):
    return {int(r["message_id"][2:]): r["id"] for r in api.records(page_size=1000)["items"]
            if r["message_id"].startswith("m-")}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_text_filters_exact_while_the_indexer_is_behind_across_kill9_edits_and_deletes(tmp_path, monkeypatch, backend):
    cfg = config_for(backend)
    # The indexer off: every record stays above the watermark, the filters scan them.
    monkeypatch.setenv("CHARON_ARCHIVE_INDEXER", "off")
    b = conftest.start_charon(tmp_path, config_text=cfg)
    try:
        api = Api(b)
        publish_all(b, range(N))
        api.wait_records(N)
        assert index_state(api)["watermark"] == 0
        ids_by_mid = ids_of(api)
        present = set(range(N))
        check(api, ids_by_mid, present, "indexer off")
        # 600 more records, so that the indexer has work for a while in small batches.
        publish_all(b, range(N, N + 600))
        api.wait_records(N + 600, timeout=120)
        present |= set(range(N, N + 600))
        ids_by_mid = ids_of(api)

        # kill -9, start with the indexer on (batches of 20), kill -9 again once it is under way.
        monkeypatch.delenv("CHARON_ARCHIVE_INDEXER")
        monkeypatch.setenv("CHARON_ARCHIVE_INDEXER_BATCH", "20")
        b.proc.kill()
        b.proc.wait(10)
        b = conftest.start_charon(tmp_path, config_text=cfg)
        api = Api(b)
        deadline = time.monotonic() + 120
        while index_state(api)["watermark"] == 0:
            assert time.monotonic() < deadline, "the indexer started"
            time.sleep(0.02)
        s = index_state(api)
        check(api, ids_by_mid, present, f"indexer under way ({s})")
        b.proc.kill()
        b.proc.wait(10)
        monkeypatch.delenv("CHARON_ARCHIVE_INDEXER_BATCH")
        b = conftest.start_charon(tmp_path, config_text=cfg)
        api = Api(b)
        s = wait_caught_up(api)
        # Nothing missed, nothing indexed twice.
        assert s["indexed_records"] == len(present), s
        check(api, ids_by_mid, present, "caught up after kill -9")

        # PUT edits of body and headers: found by their new texts at once, not by the old ones.
        edited = [0, 3, 4]
        for i in edited:
            status, _ = api.call("PUT", f"/api/dead-letters/{ids_by_mid[i]}", {
                "payload": base64.b64encode(b"edited \xff body zq-%d" % i).decode(),
                "payload_encoding": "base64",
                "headers": {"tenant": "edited-tenant", "attempt": 77},
            })
            assert status == 200

        def check_edits(when):
            got = sorted(r["id"] for r in api.records(body="body zq-")["items"])
            assert got == sorted(ids_by_mid[i] for i in edited), when
            got = sorted(r["id"] for r in api.records(**{"header.tenant": "edited-tenant"})["items"])
            assert got == sorted(ids_by_mid[i] for i in edited), when
            assert api.records(**{"header.attempt": "77"})["total"] == len(edited), when
            acme = {r["id"] for r in api.records(**{"header.tenant": "acme"})["items"]}
            assert ids_by_mid[0] not in acme and ids_by_mid[3] not in acme, when
        check_edits("right after the edits")
        wait_caught_up(api)
        check_edits("edits indexed again")

        # Deletes by filter and by ids, then a burst queried at once.
        status, _ = api.call("POST", "/api/dead-letters/delete", {"filter": {"error": "timeout"}})
        assert status == 200
        # (the edited records go too: their texts are no longer `message(i)`'s)
        gone = [i for i in present if i % 7 == 1 and i % 6 != 5 and i not in edited] + edited
        status, _ = api.call("POST", "/api/dead-letters/delete", {"ids": [ids_by_mid[i] for i in gone]})
        assert status == 200
        present -= {i for i in present if i % 6 == 5} | set(gone)
        base = N + 600
        publish_all(b, range(base, base + 40))
        api.wait_records(len(present) + 40)
        present |= set(range(base, base + 40))
        ids_by_mid = ids_of(api)
        check(api, ids_by_mid, present, "after deletes and a burst")
        wait_caught_up(api)
        check(api, ids_by_mid, present, "after deletes and a burst, caught up")
    finally:
        conftest.stop_charon(b)
