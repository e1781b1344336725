"""The broker turns transparent huge pages off for its own process (docs/archive.md "Seventh
round": mimalloc's huge-page arenas made the kernel zero 2 MiB per fresh allocator page while a
queue held a burst); `CHARON_ALLOW_THP=1` leaves them as the kernel sets them. Read from the
kernel's own view of the process, `/proc/PID/status` `THP_enabled`."""

from pathlib import Path

import pytest

import conftest

pytestmark = pytest.mark.charon_only


def thp_enabled(pid):
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        pytest.skip("no /proc (not Linux)")
    for line in status.read_text().splitlines():
        if line.startswith("THP_enabled:"):
            return line.split()[1]
    pytest.skip("the kernel does not show THP_enabled")


def test_broker_runs_without_transparent_huge_pages(private_charon):
    b = private_charon
    assert thp_enabled(b.proc.pid) == "0"
    with b.connect() as c:  # the broker works as usual
        ch = c.channel()
        ch.queue_declare("thp-off", durable=True)
        ch.basic_publish("", "thp-off", b"x" * 4096)
        method, _, body = ch.basic_get("thp-off", auto_ack=True)
        assert method is not None and body == b"x" * 4096


def test_charon_allow_thp_keeps_them(tmp_path, monkeypatch):
    monkeypatch.setenv("CHARON_ALLOW_THP", "1")
    b = conftest.start_charon(tmp_path)
    try:
        assert thp_enabled(b.proc.pid) == "1"
    finally:
        conftest.stop_charon(b)
