"""The web UI in a real headless Chromium (Debian's chromium + chromium-driver, installed by
scripts/ensure-chromium.sh): log in, look at every page, open the DLQ of a real dead-lettering
topology (messages rejected by a pika consumer, one expired), peek, check the x-death reasons
shown, filter, replay the rejected ones and check with pika that they arrive in the original
queue. A screenshot of each page goes to tests/python/ui-screenshots/ (or $CHARON_UI_SCREENSHOTS).
"""

import os
import shutil
import tempfile
import time
from pathlib import Path

import pika
import pytest

pytestmark = [pytest.mark.charon_only, pytest.mark.needs_users, pytest.mark.timeout(240)]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SHOTS = Path(os.environ.get("CHARON_UI_SCREENSHOTS", Path(__file__).parent / "ui-screenshots"))
WAIT = 60  # seconds: generous bounds for conditions, never a speed requirement


def wait_for(cond, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - elements come and go while the page refreshes
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium/chromium-driver not installed (scripts/ensure-chromium.sh could not install them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="charon-ui-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run",
              "--disable-dev-shm-usage", "--window-size=1400,1200", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.implicitly_wait(0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nUI screenshots in {SHOTS}")
    yield driver
    try:
        for entry in driver.get_log("browser"):
            if entry.get("level") == "SEVERE":
                print("browser console:", entry.get("message"))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shot(driver, name):
    time.sleep(0.3)  # let the last render paint; the screenshot is evidence, not an assertion
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def by_css(driver, css):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, css)


def dead_letter_topology(broker, uniq):
    """work exchange -> work queue (DLX dlx) -> dlx (fanout) -> dlq. Three messages rejected by a
    consumer, one expired. Returns the names."""
    work_x, work_q, dlx, dlq = uniq("ui-work-x"), uniq("ui-work"), uniq("ui-dlx"), uniq("ui-dlq")
    conn = broker.connect(user="alice", password="secret")
    ch = conn.channel()
    ch.exchange_declare(dlx, "fanout", durable=True)
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx)
    ch.exchange_declare(work_x, "direct", durable=True)
    ch.queue_declare(work_q, durable=True, arguments={"x-dead-letter-exchange": dlx})
    ch.queue_bind(work_q, work_x, "job")
    for i in range(3):
        ch.basic_publish(work_x, "job", f"order-{i}".encode(),
                         pika.BasicProperties(delivery_mode=2, content_type="text/plain",
                                              headers={"attempt": i}))
    rejected = 0
    for method, _props, _body in ch.consume(work_q, inactivity_timeout=WAIT):
        assert method is not None, "the consumer got nothing"
        ch.basic_reject(method.delivery_tag, requeue=False)
        rejected += 1
        if rejected == 3:
            break
    ch.cancel()
    ch.basic_publish(work_x, "job", b"too-late", pika.BasicProperties(expiration="1"))
    wait_for(lambda: ch.queue_declare(dlq, passive=True).method.message_count == 4, "4 dead letters in the DLQ")
    conn.close()
    return work_x, work_q, dlx, dlq


def test_ui_login_pages_dlq_peek_and_replay(broker, browser, uniq):
    from selenium.webdriver.support.ui import Select

    work_x, work_q, dlx, dlq = dead_letter_topology(broker, uniq)
    base = f"http://127.0.0.1:{broker.http_port}"
    d = browser

    # Login: a wrong password is refused, the right one opens the overview.
    d.get(base + "/")
    wait_for(lambda: by_css(d, "#login-form") and by_css(d, "#login-form")[0].is_displayed(), "the login form")
    shot(d, "00-login")
    by_css(d, "#username")[0].send_keys("alice")
    by_css(d, "#password")[0].send_keys("wrong")
    by_css(d, "#login-button")[0].click()
    wait_for(lambda: "Login failed" in by_css(d, "#login-error")[0].text, "the login error")
    by_css(d, "#password")[0].clear()
    by_css(d, "#password")[0].send_keys("secret")
    by_css(d, "#login-button")[0].click()
    wait_for(lambda: by_css(d, "#app")[0].is_displayed(), "the app after login")
    assert "alice" in by_css(d, "#who")[0].text
    wait_for(lambda: by_css(d, "#overview .tile"), "the overview tiles")
    shot(d, "01-overview")

    # Every page renders; the queues page lists the topology with its DLX.
    for i, page in enumerate(["connections", "channels", "exchanges", "queues", "policies", "users", "vhosts"], 2):
        d.get(f"{base}/#/{page}")
        wait_for(lambda: by_css(d, "main h1") and "Loading" not in by_css(d, "main")[0].text, f"the {page} page")
        if page == "queues":
            wait_for(lambda: work_q in by_css(d, "#queues-table")[0].text, "the work queue in the queue list")
            row = [r for r in by_css(d, "#queues-table tbody tr") if work_q in r.text][0]
            assert f"DLX → {dlx}" in row.text
        shot(d, f"{i:02d}-{page}")

    # The dead-letter flow: work queue -> DLX -> DLQ, with the reasons counted.
    d.get(f"{base}/#/flow")
    wait_for(lambda: by_css(d, "#flow-graph"), "the flow graph")
    graph = by_css(d, "#flow-graph")[0].get_attribute("textContent")
    assert work_q in graph and dlx in graph, graph
    wait_for(lambda: dlq in by_css(d, "#flow-graph")[0].get_attribute("textContent"), "the DLQ in the flow graph")
    # Per-reason counts on the queue -> DLX edge and in the table.
    wait_for(lambda: "rejected 3" in by_css(d, "#flow-graph")[0].get_attribute("textContent")
             and "expired 1" in by_css(d, "#flow-graph")[0].get_attribute("textContent"), "counts per reason on the edge")
    rows = [r.text for r in by_css(d, "#flow-table tbody tr")]
    assert any(work_q in r and "rejected" in r and " 3 " in f" {r} " and dlq in r for r in rows), rows
    shot(d, "10-flow")

    # The DLQ browser lists the DLQ; open it and peek.
    d.get(f"{base}/#/dlq")
    wait_for(lambda: dlq in by_css(d, "#dlq-table")[0].text, "the DLQ in the list of dead-letter queues")
    shot(d, "11-dlq-list")
    d.get(f"{base}/#/dlq/%2F/{dlq}")
    wait_for(lambda: len(by_css(d, "#messages-table tr.message")) == 4, "4 peeked messages")
    text = by_css(d, "#messages-table")[0].text
    assert text.count("rejected") == 3 and text.count("expired") == 1, text
    assert work_q in text and "order-0" in text
    # The x-death history of a message, decoded.
    by_css(d, "#messages-table .details-toggle")[0].click()
    hist = wait_for(lambda: by_css(d, "#messages-table tr.detail")[0].text, "the x-death history shown")
    assert "x-death history" in hist and work_q in hist and work_x in hist
    shot(d, "12-dlq-peek")

    # Peeking consumed nothing.
    conn = broker.connect(user="alice", password="secret")
    ch = conn.channel()
    assert ch.queue_declare(dlq, passive=True).method.message_count == 4

    # Filter by reason, select what is shown, replay.
    Select(by_css(d, "#filter-reason")[0]).select_by_value("rejected")
    wait_for(lambda: len(by_css(d, "#messages-table tr.message")) == 3, "3 rejected messages after filtering")
    Select(by_css(d, "#filter-queue")[0]).select_by_value(work_q)
    assert len(by_css(d, "#messages-table tr.message")) == 3
    by_css(d, "#select-all")[0].click()
    wait_for(lambda: "3 selected" in by_css(d, "#selected-count")[0].text, "3 selected")
    shot(d, "13-dlq-selected")
    by_css(d, "#replay-button")[0].click()
    wait_for(lambda: "Replayed: 3" in by_css(d, "#toasts")[0].text, "the replay notice")
    Select(by_css(d, "#filter-reason")[0]).select_by_value("")
    wait_for(lambda: len(by_css(d, "#messages-table tr.message")) == 1, "only the expired message left in the DLQ")
    shot(d, "14-dlq-after-replay")

    # The replayed messages arrive in the original queue, with body and headers.
    bodies = {}
    for _ in range(3):
        _method, props, body = _get(ch, work_q)
        bodies[body.decode()] = props
    assert sorted(bodies) == ["order-0", "order-1", "order-2"]
    assert bodies["order-1"].headers["attempt"] == 1
    assert bodies["order-1"].headers["x-death"][0]["reason"] == "rejected"
    assert ch.queue_declare(dlq, passive=True).method.message_count == 1
    conn.close()


def _get(ch, queue):
    """basic.get until a message comes (bounded)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, props, body
        time.sleep(0.2)
    raise AssertionError(f"no message in {queue} within {WAIT}s")
