"""The web UI in a real headless Chromium (Debian's chromium + chromium-driver, installed by
scripts/ensure-chromium.sh): log in, look at every page, open the DLQ of a real dead-lettering
topology (messages rejected by a pika consumer, one expired), peek, check the x-death reasons
shown, filter, replay the rejected ones and check with pika that they arrive in the original
queue. A screenshot of each page goes to tests/python/ui-screenshots/ (or $CHARON_UI_SCREENSHOTS).
"""

import datetime
import os
import re
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


def select_value(driver, css, value):
    """Chooses `value` in the <select> at `css`, again if the page re-rendered it meanwhile
    (a stale element after a refresh), until the select shows it."""
    from selenium.webdriver.support.ui import Select

    def attempt():
        choice = Select(by_css(driver, css)[0])
        choice.select_by_value(value)
        return Select(by_css(driver, css)[0]).first_selected_option.get_attribute("value") == value

    wait_for(attempt, f"{css} set to {value!r}")


def row_text(d, table_css, text):
    """The text of the first row of `table_css` containing `text` (pages re-render their tables
    every few seconds, so rows are looked up afresh until one is read whole)."""
    return wait_for(lambda: next((t for t in rows_text(d, table_css) if text in t), None),
                    f"a row with {text!r} in {table_css}")


def rows_text(d, table_css):
    """The text of every row of `table_css`, read in one script run (so a re-render between
    rows cannot leave a stale element, however slow the machine)."""
    return d.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr')).map(r => r.innerText.replace(/\s+/g, ' ').trim())",
        table_css) or []


def click_in_row(d, table_css, text, button="button"):
    """Clicks `button` in the first row of `table_css` containing `text` (retried across re-renders)."""
    def attempt():
        # Found in one script run (a re-render cannot intervene); clicked just after it returns,
        # since the click may open a confirm dialog, which would block the script.
        return d.execute_script(
            "const row = Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
            "  .find(r => r.innerText.includes(arguments[1]));"
            "const b = row && row.querySelector(arguments[2]);"
            "if (!b) return false; setTimeout(() => b.click(), 0); return true;",
            table_css, text, button)
    wait_for(attempt, f"clicking {button} in the row with {text!r}")


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
            assert f"DLX → {dlx}" in row_text(d, "#queues-table", work_q)
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
    rows = wait_for(lambda: rows_text(d, "#flow-table"), "the flow table")
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
    select_value(d, "#filter-reason", "rejected")
    wait_for(lambda: len(by_css(d, "#messages-table tr.message")) == 3, "3 rejected messages after filtering")
    select_value(d, "#filter-queue", work_q)
    assert len(by_css(d, "#messages-table tr.message")) == 3
    by_css(d, "#select-all")[0].click()
    wait_for(lambda: "3 selected" in by_css(d, "#selected-count")[0].text, "3 selected")
    shot(d, "13-dlq-selected")
    by_css(d, "#replay-button")[0].click()
    wait_for(lambda: "Replayed: 3" in by_css(d, "#toasts")[0].text, "the replay notice")
    select_value(d, "#filter-reason", "")
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
    # Moved inside the broker (POST .../messages/replay), not re-published from JSON: the x-death
    # time is still an AMQP timestamp (pika: a datetime), and each message is in one place only.
    assert all(isinstance(p.headers["x-death"][0]["time"], datetime.datetime) for p in bodies.values())
    assert ch.queue_declare(work_q, passive=True).method.message_count == 0
    assert ch.queue_declare(dlq, passive=True).method.message_count == 1

    # Move the expired one elsewhere: to a parking queue through the default exchange.
    parking = uniq("ui-parking")
    ch.queue_declare(parking)
    by_css(d, "#select-all")[0].click()
    by_css(d, "#move-exchange")[0].send_keys("")
    by_css(d, "#move-key")[0].send_keys(parking)
    by_css(d, "#move-button")[0].click()
    wait_for(lambda: "Moved: 1" in by_css(d, "#toasts")[0].text, "the move notice")
    wait_for(lambda: not by_css(d, "#messages-table tr.message"), "the DLQ shown empty")
    _method, props, body = _get(ch, parking)
    assert body == b"too-late" and props.headers["x-death"][0]["reason"] == "expired"
    assert isinstance(props.headers["x-death"][0]["time"], datetime.datetime)
    assert ch.queue_declare(dlq, passive=True).method.message_count == 0
    shot(d, "15-dlq-empty")
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


def login(d, base):
    d.get(base + "/")
    wait_for(lambda: by_css(d, "#login-form") and by_css(d, "#login-form")[0].is_displayed(), "the login form")
    by_css(d, "#username")[0].send_keys("alice")
    by_css(d, "#password")[0].send_keys("secret")
    by_css(d, "#login-button")[0].click()
    wait_for(lambda: by_css(d, "#app")[0].is_displayed(), "the app after login")


def click_button(d, text):
    wait_for(lambda: [b for b in by_css(d, "main button") if b.text == text], f"the button {text!r}")[0].click()


def toast_says(d, text):
    wait_for(lambda: text in by_css(d, "#toasts")[0].text, f"the notice {text!r}")


def test_ui_usual_actions(broker, browser, uniq):
    """Declare a queue with arguments, publish and get through the UI, bind/unbind, set and clear a
    policy, add a user and a vhost and delete them, close a connection: each checked from outside
    (pika or the API)."""

    from dlx_helpers import api

    d = browser
    base = f"http://127.0.0.1:{broker.http_port}"
    admin = {"user": "alice", "password": "secret"}
    login(d, base)
    q, x, pol, user, vhost = uniq("ui-q"), uniq("ui-x"), uniq("ui-pol"), uniq("ui-user"), uniq("ui-vh")

    d.get(f"{base}/#/queues")
    wait_for(lambda: by_css(d, "#new-queue-name"), "the add-queue form")
    by_css(d, "#new-queue-name")[0].send_keys(q)
    by_css(d, "#add-queue textarea")[0].send_keys("x-max-length = 5")
    by_css(d, "#add-queue-button")[0].click()
    toast_says(d, f"Queue {q} declared")
    status, info = api(broker, "GET", f"/api/queues/%2F/{q}", **admin)
    assert status == 200 and info["arguments"] == {"x-max-length": 5}, (status, info)

    d.get(f"{base}/#/queue/%2F/{q}")
    wait_for(lambda: by_css(d, ".publish-form textarea[name=payload]"), "the publish form")
    by_css(d, ".publish-form textarea[name=payload]")[0].send_keys("from the UI")
    by_css(d, ".publish-form button")[0].click()
    toast_says(d, "Message published")
    select_value(d, "#get-form select[name=ackmode]", "ack_requeue_false")
    by_css(d, "#get-button")[0].click()
    wait_for(lambda: "from the UI" in by_css(d, "#get-results")[0].text, "the message got")
    shot(d, "20-queue-get")
    cname = uniq("ui-test-connection")
    conn = broker.connect(user="alice", password="secret", client_properties={"connection_name": cname})
    ch = conn.channel()
    assert ch.queue_declare(q, passive=True).method.message_count == 0, "get with ack_requeue_false consumed it"

    d.get(f"{base}/#/exchanges")
    wait_for(lambda: by_css(d, "#add-exchange input[name=name]"), "the add-exchange form")
    by_css(d, "#add-exchange input[name=name]")[0].send_keys(x)
    select_value(d, "#add-exchange select[name=type]", "topic")
    by_css(d, "#add-exchange button.primary")[0].click()
    toast_says(d, f"Exchange {x} declared")
    d.get(f"{base}/#/exchange/%2F/{x}")
    wait_for(lambda: by_css(d, "form.row input[name=destination]"), "the bind form")
    by_css(d, "form.row input[name=destination]")[0].send_keys(q)
    by_css(d, "form.row input[name=routing_key]")[0].send_keys("a.#")
    click_button(d, "Bind")
    toast_says(d, "Binding added")
    ch.basic_publish(x, "a.b.c", b"routed")
    assert wait_for(lambda: ch.basic_get(q, auto_ack=True)[2], "the message routed by the new binding") == b"routed"
    click_button(d, "Unbind")
    toast_says(d, "Binding removed")
    assert api(broker, "GET", f"/api/bindings/%2F/e/{x}/q/{q}", **admin)[1] == []

    d.get(f"{base}/#/policies")
    wait_for(lambda: by_css(d, "#add-policy input[name=name]"), "the policy form")
    by_css(d, "#add-policy input[name=name]")[0].send_keys(pol)
    by_css(d, "#add-policy input[name=pattern]")[0].send_keys(f"^{q}$")
    by_css(d, "#add-policy textarea")[0].send_keys("message-ttl = 60000")
    by_css(d, "#add-policy button.primary")[0].click()
    toast_says(d, f"Policy {pol} set")
    wait_for(lambda: api(broker, "GET", f"/api/queues/%2F/{q}", **admin)[1].get("policy") == pol, "the policy applied")
    row_text(d, "#policies-table", pol)
    shot(d, "21-policies")
    click_in_row(d, "#policies-table", pol)
    d.switch_to.alert.accept()
    toast_says(d, f"Policy {pol} cleared")
    assert api(broker, "GET", f"/api/policies/%2F/{pol}", **admin)[0] == 404

    d.get(f"{base}/#/users")
    wait_for(lambda: by_css(d, "#add-user input[name=name]"), "the user form")
    by_css(d, "#add-user input[name=name]")[0].send_keys(user)
    by_css(d, "#add-user input[name=password]")[0].send_keys("pw-1")
    by_css(d, "#add-user input[name=tags]")[0].send_keys("management")
    by_css(d, "#add-user button")[0].click()
    toast_says(d, f"User {user} saved")
    by_css(d, "#set-permission input[name=user]")[0].send_keys(user)
    by_css(d, "#set-permission button")[0].click()
    toast_says(d, f"Permissions of {user} on / set")
    broker.connect(user=user, password="pw-1").close()  # the new user logs in over AMQP
    click_in_row(d, "#users-table", user)
    d.switch_to.alert.accept()
    toast_says(d, f"User {user} deleted")
    assert api(broker, "GET", f"/api/users/{user}", **admin)[0] == 404

    d.get(f"{base}/#/vhosts")
    wait_for(lambda: by_css(d, "#add-vhost input[name=name]"), "the vhost form")
    by_css(d, "#add-vhost input[name=name]")[0].send_keys(vhost)
    by_css(d, "#add-vhost button")[0].click()
    toast_says(d, f"Vhost {vhost} added")
    assert api(broker, "GET", f"/api/vhosts/{vhost}", **admin)[0] == 200
    click_in_row(d, "#vhosts-table", vhost)
    d.switch_to.alert.accept()
    toast_says(d, f"Vhost {vhost} deleted")
    assert api(broker, "GET", f"/api/vhosts/{vhost}", **admin)[0] == 404

    # Close the pika connection from the connections page.
    d.get(f"{base}/#/connections")
    row_text(d, "#connections-table", cname)
    shot(d, "22-connections")
    click_in_row(d, "#connections-table", cname)
    d.switch_to.alert.accept()
    toast_says(d, "closed")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            conn.process_data_events(0.2)
    assert closed.value.reply_code == 320


def test_ui_archive_groups_replay_edit_audit(broker, browser, uniq):
    """The archive page (only where the broker has the dead-letter archive API): records listed,
    grouped by error, a group replayed to its original queue (checked with pika), a record edited
    with its original kept, the audit trail showing both."""
    from dlx_helpers import api

    admin = {"user": "alice", "password": "secret"}
    if api(broker, "GET", "/api/dead-letters/stats", **admin)[0] == 404:
        pytest.skip("this build has no dead-letter archive API (/api/dead-letters, issue 9)")
    d = browser
    base = f"http://127.0.0.1:{broker.http_port}"
    work, dlx, arch = uniq("ui-arch-work"), uniq("ui-arch-dlx"), uniq("ui-arch-dlq")
    conn = broker.connect(user="alice", password="secret")
    ch = conn.channel()
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(arch, arguments={"x-dead-letter-archive": True})
    ch.queue_bind(arch, dlx)
    ch.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    errors = [f"Order {i} not found" for i in range(3)] + ["Timeout talking to the database"]
    for i, err in enumerate(errors):
        ch.basic_publish("", work, f"order {i}".encode(),
                         pika.BasicProperties(message_id=f"{work}-{i}", headers={"x-exception-message": err}))
    for _ in errors:
        method = wait_for(lambda: ch.basic_get(work)[0], "a message to reject")
        ch.basic_reject(method.delivery_tag, requeue=False)

    def records():
        status, body = api(broker, "GET", f"/api/dead-letters?original_queue={work}", **admin)
        return body["items"] if status == 200 else []
    wait_for(lambda: len(records()) == 4, "4 archived records")

    login(d, base)
    wait_for(lambda: by_css(d, "#nav-archive")[0].is_displayed(), "the archive in the navigation")
    d.get(f"{base}/#/archive/records?original_queue={work}")
    wait_for(lambda: len(by_css(d, "#archive-table tbody tr")) == 4, "4 records listed")
    shot(d, "30-archive-records")

    d.get(f"{base}/#/archive/groups")
    row = wait_for(lambda: [t for t in rows_text(d, "#groups-table") if work in t and "not found" in t],
                   "the 'not found' group")[0]
    assert " 3 " in f" {row} ", row
    shot(d, "31-archive-groups")
    wait_for(lambda: d.execute_script(
        "const row = Array.from(document.querySelectorAll('#groups-table tbody tr'))"
        "  .find(r => r.innerText.includes(arguments[0]) && r.innerText.includes('not found'));"
        "const b = row && Array.from(row.querySelectorAll('button')).find(b => b.innerText === 'Replay group');"
        "if (!b) return false; setTimeout(() => b.click(), 0); return true;", work), "clicking 'Replay group'")
    toast_says(d, "Replay job")
    got = []
    while len(got) < 3:
        method, _props, body = _get(ch, work)
        got.append(body.decode())
    assert sorted(got) == ["order 0", "order 1", "order 2"]
    d.get(f"{base}/#/archive/jobs")
    wait_for(lambda: "DONE" in by_css(d, "main")[0].text, "the replay job done")
    shot(d, "32-archive-jobs")

    other = [r for r in records() if r["error_message"] == errors[3]][0]
    d.get(f"{base}/#/archive/record/{other['id']}")
    wait_for(lambda: by_css(d, "#edit-record textarea[name=payload]"), "the record's edit form")
    payload = by_css(d, "#edit-record textarea[name=payload]")[0]
    payload.clear()
    payload.send_keys("order 3, fixed")
    by_css(d, "#edit-record input[name=note]")[0].send_keys("fixed by hand")
    by_css(d, "#edit-record button")[0].click()
    toast_says(d, f"Record {other['id']} saved")
    wait_for(lambda: "order 3" in by_css(d, "main")[0].text.split("Edit history")[-1], "the original in the history")
    assert api(broker, "GET", f"/api/dead-letters/{other['id']}", **admin)[1]["payload"] == "order 3, fixed"
    shot(d, "33-archive-record")

    d.get(f"{base}/#/archive/audit")
    text = wait_for(lambda: by_css(d, "#audit-table")[0].text, "the audit trail")
    assert "edit" in text and "replay" in text and "alice" in text, text
    shot(d, "34-archive-audit")
    conn.close()


def test_ui_archive_groups_of_the_newest_matches_show_lower_bounds(broker, browser, uniq):
    """The archive's groups view with a text filter from its route (`#/archive/groups?error=…`)
    over 10,050 matches: the groups cover the newest 10,000 (docs/archive.md "API",
    `count_relation`), so each count shows "+" and the view says so; under 10,000 matches the
    counts are exact, without "+" or the sentence."""
    from dlx_helpers import api

    admin = {"user": "alice", "password": "secret"}
    if api(broker, "GET", "/api/dead-letters/stats", **admin)[0] == 404:
        pytest.skip("this build has no dead-letter archive API (/api/dead-letters, issue 9)")
    d = browser
    base = f"http://127.0.0.1:{broker.http_port}"
    arch, tag = uniq("ui-gcap-dlq"), uniq("gcap")
    n = 10_050
    conn = broker.connect(user="alice", password="secret")
    ch = conn.channel()
    ch.queue_declare(arch, durable=True, arguments={"x-dead-letter-archive": True})
    for i in range(n):
        err = f"{tag} failed" + (" rarely" if i % 10 == 0 else "")
        ch.basic_publish("", arch, b"x", pika.BasicProperties(
            delivery_mode=2, headers={"x-exception-message": err}))

    def archived():
        status, body = api(broker, "GET", f"/api/dead-letters?queue={arch}&page_size=1", **admin)
        return body["total"] if status == 200 else 0
    wait_for(lambda: archived() == n, f"{n} archived records", timeout=180)

    login(d, base)
    wait_for(lambda: by_css(d, "#nav-archive")[0].is_displayed(), "the archive in the navigation")
    d.get(f"{base}/#/archive/groups?error={tag}")
    rows = wait_for(lambda: [t for t in rows_text(d, "#groups-table") if "PENDING" in t],
                    "the groups of the newest matches")
    # Two groups (the messages with and without "rarely" differ in fingerprint), each a lower
    # bound, together the newest 10,000.
    counts = [re.findall(r"([\d,]+)\+", t) for t in rows]
    assert all(len(c) == 1 for c in counts), rows
    assert sum(int(c[0].replace(",", "")) for c in counts) == 10_000, rows
    note = wait_for(lambda: by_css(d, "#groups-newest"), "the newest-matches sentence")[0]
    assert "newest 10,000 matches" in note.text, note.text
    shot(d, "33-archive-groups-newest")
    # 1,005 matches: exact.
    d.get(f"{base}/#/archive/groups?error={tag} failed rarely")
    row = wait_for(lambda: [t for t in rows_text(d, "#groups-table") if "1,005" in t or "1005" in t],
                   "the exact group")[0]
    assert "+" not in row, row
    assert not by_css(d, "#groups-newest")
    conn.close()
