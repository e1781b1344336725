"""The short form of scripts/chaos.sh: kill -9 cycles under confirmed publishing, acking and
rejecting into a DLQ; every confirmed message must end in exactly one place."""

import os
import subprocess
import sys

import pytest

import conftest

pytestmark = pytest.mark.charon_only


def test_chaos_short_form():
    r = subprocess.run(
        [sys.executable, str(conftest.REPO / "scripts/chaos.py"), "--cycles", "3",
         "--cycle-seconds", "1", "--binary", conftest.find_binary()],
        capture_output=True, text=True, timeout=900)
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0, r.stdout[-3000:]
    assert "OK: every confirmed message is in exactly one place" in r.stdout
    assert "lost: 0; duplicated in DLQ: 0; misplaced: 0" in r.stdout
