"""The panel in a real Chromium (DESIGN §9), against a running shimgate the
Rust test set up (its routes, upstreams and config file in `params`):

- it loads with no console error and no request to another origin;
- its counters equal /status and follow it while calls run;
- a quota answer shows the route cooling with its local time, and the
  switch it caused under its conversation and in the recent calls;
- every control changes /status as its endpoint would; move up/down, the
  mode switch and "adopt measured order" rewrite the config file keeping
  its comments; a refused write leaves the file byte-identical and the
  page shows why;
- route windows show in the effective order, and a call with every route
  out gets 503 NO_ACTIVE_ROUTE;
- the Chinese page shows Chinese;
- a screenshot for README.

Failed checks raise AssertionError with what was seen.
"""
import json
import os
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from zoneinfo import ZoneInfo

ZONE = "Asia/Shanghai"


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def call(base, path, body, headers=None):
    """A POST as an agent sends it; (status, headers, body text)."""
    req = urllib.request.Request(base + path, data=body.encode(), method="POST")
    req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def eventually(check, what, timeout=8.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # the DOM may be mid-render
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{what}: last saw {last!r}")


def local(iso):
    """How the page writes a time in the browser's zone: MM-DD HH:MM."""
    at = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(ZONE))
    return at.strftime("%m-%d %H:%M")


def testid(page, tid):
    return page.get_by_test_id(tid)


def run(browser, params):
    base, qoder, trae = params["base"], params["qoder"], params["trae"]
    config = params["configFile"]
    status = lambda: get(base + "/status")
    found = {}

    context = browser.new_context(timezone_id=ZONE, locale="en-US", viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    console, foreign = [], []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.on("request", lambda r: None if r.url.startswith(base + "/") else foreign.append(r.url))
    page.goto(base + "/ui")
    button = lambda name: page.get_by_role("button", name=name, exact=True)

    # Counters equal /status.
    def counters_match():
        s = status()
        for shim in ("qoder", "trae"):
            for c in ("intercepted", "forwarded", "compacted", "folded", "fallback"):
                if testid(page, f"counter-{shim}-{c}").inner_text() != str(s[f"{shim}Shim"][c]):
                    return False
        return True

    eventually(counters_match, "counters equal /status at start")

    # A quota answer on q-first: the call switches to q-second, under its
    # conversation; q-first cools, shown in local time.
    code, headers, _ = call(qoder, params["qoderPath"], params["qoderAsk"], {"x-session-id": "conv-42"})
    assert code == 200, code
    low = {k.lower(): v for k, v in headers.items()}
    found["answerHead"] = {k: low.get(k) for k in ("x-shimgate-route", "x-shimgate-switched-from")}
    until = eventually(lambda: next(r for r in status()["chain"]["routes"]["qoder"] if r["name"] == "q-first")["cooldownUntil"], "q-first cools")
    cooling = f"cooling, back at {local(until)}"
    eventually(lambda: cooling in testid(page, "effective-qoder-q-first").inner_text(), f"the effective order says {cooling!r}")
    found["cooling"] = testid(page, "effective-qoder-q-first").inner_text()
    eventually(lambda: "conv-42" in testid(page, "switches").inner_text(), "the switch under its conversation")
    switch_text = testid(page, "switches").inner_text()
    assert "q-first → q-second" in switch_text and "QUOTA" in switch_text, switch_text
    calls_text = testid(page, "calls").inner_text()
    assert "q-first QUOTA" in calls_text and "q-second answered" in calls_text, calls_text
    row = testid(page, "route-qoder-q-first").inner_text()
    assert "cooling" in row and "QUOTA" in row, row

    # Live: counters follow /status while calls run.
    seen = set()
    def calls():
        # Paced as an agent's turns are: the page polls once a second.
        for _ in range(6):
            call(qoder, params["qoderPath"], params["qoderAsk"])
            call(trae, params["traePath"], params["traeBody"])
            time.sleep(0.6)
    worker = threading.Thread(target=calls)
    worker.start()
    while worker.is_alive():
        seen.add(testid(page, "counter-qoder-intercepted").inner_text())
        time.sleep(0.15)
    worker.join()
    eventually(counters_match, "counters equal /status after the calls")
    found["liveValues"] = sorted(seen, key=int)
    assert len(seen) >= 3, f"the counter moved while calls ran: {seen}"
    speed = eventually(lambda: testid(page, "route-qoder-q-second").inner_text() if "tokens/s" in testid(page, "route-qoder-q-second").inner_text() else None, "q-second shows its output speed")
    found["speedRow"] = speed
    shot = params.get("screenshot")
    if shot:
        page.wait_for_timeout(1200)
        page.screenshot(path=shot, full_page=True)

    # Hand controls: each changes /status as its endpoint would.
    effective = lambda shim: status()["chain"]["ordering"]["effective"][shim]
    reason = lambda shim, r: next(e["reason"] for e in effective(shim) if e["route"] == r)
    button("Disable q-second").click()
    eventually(lambda: reason("qoder", "q-second") == "disabled", "Disable")
    eventually(lambda: button("Enable q-second").count() == 1, "the Enable button")
    button("Enable q-second").click()
    eventually(lambda: reason("qoder", "q-second") != "disabled", "Enable")
    eventually(lambda: button("Pin q-second").count() == 1, "the Pin button")
    button("Pin q-second").click()
    eventually(lambda: status()["chain"]["ordering"]["pinned"]["qoder"] == "q-second", "Pin")
    eventually(lambda: button("Unpin qoder").count() == 1, "the Unpin button")
    button("Unpin qoder").click()
    eventually(lambda: status()["chain"]["ordering"]["pinned"]["qoder"] is None, "Unpin")

    # Failed today: restore one, then all.
    eventually(lambda: button("Restore q-first").count() == 1, "q-first under failed today")
    button("Restore q-first").click()
    first = lambda: next(r for r in status()["chain"]["routes"]["qoder"] if r["name"] == "q-first")
    eventually(lambda: first()["cooldownUntil"] is None, "Restore q-first clears its cooldown")
    changes = first()["changes"]
    assert changes[0]["change"] == "restored" and changes[0]["byHand"], changes
    assert any(c["change"] == "cooled" and c["source"] for c in changes), changes
    found["changes"] = changes[:3]
    # q-first now fails with 500s: its record sinks (the ranking's input).
    for _ in range(3):
        code, _, _ = call(qoder, params["qoderPath"], params["qoderAsk"])
        assert code == 200, code
    eventually(lambda: first()["samples"] >= 3, "q-first has a record")
    button("Restore all").click()
    def all_clear():
        routes = [r for shim in status()["chain"]["routes"].values() for r in shim]
        return all(r["cooldownUntil"] is None and r["breaker"]["state"] == "closed" for r in routes)
    eventually(all_clear, "Restore all clears every cooldown and breaker")

    # Config writes: move, mode, adopt; comments stay.
    before = open(config).read()
    button("Move q-second up").click()
    eventually(lambda: [e["route"] for e in effective("qoder")][:2] == ["q-second", "q-first"], "Move up reorders")
    after = open(config).read()
    assert after.index('name = "q-second"') < after.index('name = "q-first"'), after
    for line in before.splitlines():
        if line.lstrip().startswith("#"):
            assert line in after, f"comment {line!r} lost:\n{after}"
    eventually(lambda: testid(page, "effective-qoder").inner_text().split("\n")[0].startswith("q-second"), "the page's effective order follows")
    button("Move q-second down").click()
    eventually(lambda: [e["route"] for e in effective("qoder")][:2] == ["q-first", "q-second"], "Move down reorders")
    page.get_by_label("Ordering mode").select_option("measured")
    eventually(lambda: status()["chain"]["ordering"]["mode"] == "measured", "the mode switch")
    assert 'mode = "measured"' in open(config).read()
    eventually(lambda: [e["reason"] for e in effective("qoder")][0] == "ranked", "measured mode ranks")
    ranked = [e["route"] for e in effective("qoder")]
    assert ranked == ["q-second", "q-first"], ranked
    button("Adopt measured order qoder").click()
    configured = lambda: [r["name"] for r in status()["chain"]["routes"]["qoder"]]
    eventually(lambda: configured() == ranked, "adopt writes the ranking as the configured order")
    written = open(config).read()
    assert written.index('name = "q-second"') < written.index('name = "q-first"'), written
    found["adopted"] = configured()
    page.get_by_label("Ordering mode").select_option("auto")
    eventually(lambda: status()["chain"]["ordering"]["mode"] == "auto", "back to auto")

    # A refused write: the file stays byte-identical and the page says why.
    kept = open(config, "rb").read()
    quiet_until = len(console)
    os.chmod(config, 0o444)
    try:
        button("Move q-first up").click()
        eventually(lambda: "read-only" in testid(page, "error").inner_text(), "the refusal is shown")
        found["refused"] = testid(page, "error").inner_text()
        assert open(config, "rb").read() == kept, "a refused write changed the file"
    finally:
        os.chmod(config, 0o644)
    # The browser logs the refused POST's 409 itself; nothing else may be.
    refused_logs = console[quiet_until:]
    assert all("409" in m for m in refused_logs), refused_logs
    del console[quiet_until:]

    # Route windows: t-night is off hours; with t-day disabled no route is
    # active and a call gets 503.
    night = testid(page, "effective-trae-t-night").inner_text()
    next_open = next(e["until"] for e in effective("trae") if e["route"] == "t-night")
    assert f"off hours, opens at {local(next_open)}" in night, night
    found["offHours"] = night
    button("Disable t-day").click()
    eventually(lambda: reason("trae", "t-day") == "disabled", "Disable t-day")
    code, _, text = call(trae, params["traePath"], params["traeBody"])
    found["noActive"] = (code, json.loads(text)["error"]["code"] if text.startswith("{") else text[:200])
    button("Enable t-day").click()
    eventually(lambda: reason("trae", "t-day") != "disabled", "Enable t-day")

    eventually(counters_match, "counters equal /status at the end")

    # Chinese: ?lang=zh, the browser's preference, and the switch back.
    page.goto(base + "/ui?lang=zh")
    eventually(lambda: page.locator("#h-shims").inner_text() == "垫片", "the Chinese page")
    found["zh"] = [page.locator(h).inner_text() for h in ("#h-chain", "#h-routes", "#h-switches")]
    page.get_by_role("button", name="English", exact=True).click()
    eventually(lambda: page.locator("#h-shims").inner_text() == "Shims", "back to English")
    context.close()
    zh = browser.new_context(locale="zh-CN", timezone_id=ZONE)
    zpage = zh.new_page()
    zpage.goto(base + "/ui")
    eventually(lambda: zpage.locator("#h-routes").inner_text() == "线路", "Chinese when the browser prefers it")
    zh.close()

    found["console"] = console
    found["foreign"] = foreign
    return found
