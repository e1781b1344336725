"""Helpers for the management-plane tests: a `requests` session on the broker's API, polling."""

import time
import urllib.parse

import pytest
import requests


def q(name):
    return urllib.parse.quote(name, safe="")


class Api:
    def __init__(self, broker, user="guest", password="guest", port=None):
        self.base = f"http://127.0.0.1:{port or broker.http_port}/api"
        self.s = requests.Session()
        self.s.auth = (user, password)

    def get(self, path, **kw):
        return self.s.get(self.base + path, timeout=30, **kw)

    def put(self, path, body=None, **kw):
        return self.s.put(self.base + path, json=body, timeout=30, **kw)

    def post(self, path, body=None, **kw):
        return self.s.post(self.base + path, json=body, timeout=30, **kw)

    def delete(self, path, **kw):
        return self.s.delete(self.base + path, timeout=30, **kw)

    def ok(self, path):
        r = self.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


def wait_for(cond, timeout=60.0, what="condition"):
    """Polls `cond` (returning a truthy value) for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
