"""The panel in a real Chromium (docs/panel.md), against a running shimgate the
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
- the success column is the measured ok / tries with its count, the
  smoothed rate only as the score; each shim's chart has a legend, a
  unit and a time axis in local time; every time is local, in one
  format; the call kind is a plain word with the internal one in a
  tooltip;
- an action redraws the page from its POST's answer, with /status
  unreachable;
- the Chinese page shows Chinese, breaker state, call kind and outcome
  included;
- pictures in English and Chinese (`params["shots"]`).

`run_many` is the panel at 400 routes and with a shim that has none.

Failed checks raise AssertionError with what was seen.
"""
import json
import os
import re
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
    """How the page writes every time, in the browser's zone: MM-DD HH:MM:SS."""
    at = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(ZONE))
    return at.strftime("%m-%d %H:%M:%S")


# A UTC instant as /status writes it, and a time in any format but the
# page's one (no seconds, or a year in front).
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
OTHER_TIME = re.compile(r"\d\d-\d\d \d\d:\d\d(?!:\d\d)|\d{4}-\d\d-\d\d \d\d:\d\d")


def times_are_local_and_one_format(page):
    text = page.locator("main").inner_text()
    bad = ISO.findall(text) + OTHER_TIME.findall(text)
    assert not bad, f"times not in the page's one local format: {bad}"


def measured_success(page, status, shim, name):
    """The success cell says ok / tries measured, the score cell the score."""
    r = next(r for r in status()["chain"]["routes"][shim] if r["name"] == name)
    want = f"{round(r['ok'] * 100 / r['attempts'])}% ({r['ok']}/{r['attempts']})"
    got = testid(page, f"success-{shim}-{name}").inner_text()
    return (got, want) if got == want and testid(page, f"score-{shim}-{name}").inner_text() == str(r["score"]) else None


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
    # The config names no zone: no zone note.
    assert status()["chain"]["ordering"]["zone"] == "local"
    assert testid(page, "zone-note").is_hidden()

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

    # Success is measured (7 of 7 is 100 %), the smoothed rate is the score.
    found["success"] = eventually(lambda: measured_success(page, status, "qoder", "q-second"), "q-second's measured success")
    assert found["success"][0].startswith("100% ("), found["success"]
    # The chart: a legend, a unit, a time span and a time axis in local time.
    chart = testid(page, "chart-qoder")
    caption = chart.locator("figcaption").inner_text()
    assert "calls" in caption and "folded" in caption and "per 15 s" in caption and "local time" in caption, caption
    ticks = chart.locator("svg text.tick").all_text_contents()
    assert sum(bool(re.fullmatch(r"\d\d:\d\d", x)) for x in ticks) >= 1 and "0" in ticks, ticks
    found["chart"] = {"caption": caption, "ticks": ticks}
    times_are_local_and_one_format(page)
    # The call kind in plain words (direct mode: every call is direct),
    # the internal word in the tooltip.
    kind = page.locator('[data-testid="calls"] [data-kind="fallback"]').first
    assert kind.inner_text() == "direct" and "fallback" in kind.get_attribute("title"), (kind.inner_text(), kind.get_attribute("title"))
    assert "fallback" not in testid(page, "calls").inner_text(), testid(page, "calls").inner_text()
    # The skipped route's reason in the effective order's words.
    calls_text = testid(page, "calls").inner_text()
    assert "q-first: skipped (cooling, back at " in calls_text, calls_text
    # Pictures in English and Chinese, at the same moment of the story.
    shots = params.get("shots")
    if shots:
        page.wait_for_timeout(1200)
        page.screenshot(path=os.path.join(shots, "panel-en.png"), full_page=True)
        page.get_by_role("button", name="简体中文", exact=True).click()
        eventually(lambda: page.locator("#h-shims").inner_text() == "垫片", "the Chinese page for its picture")
        page.wait_for_timeout(300)
        page.screenshot(path=os.path.join(shots, "panel-zh.png"), full_page=True)
        zh_words(page, found)
        page.get_by_role("button", name="English", exact=True).click()
        eventually(lambda: page.locator("#h-shims").inner_text() == "Shims", "back to English after the picture")

    # Hand controls: each changes /status as its endpoint would.
    effective = lambda shim: status()["chain"]["ordering"]["effective"][shim]
    reason = lambda shim, r: next(e["reason"] for e in effective(shim) if e["route"] == r)
    # With /status unreachable the page still redraws: from the POST's answer.
    page.route("**/status", lambda r: r.abort())
    page.route("**/switches", lambda r: r.abort())
    clicked = time.time()
    button("Disable q-second").click()
    eventually(lambda: "disabled" in testid(page, "effective-qoder-q-second").inner_text(), "the page redraws from the POST's answer", timeout=2)
    eventually(lambda: button("Enable q-second").count() == 1, "the Enable button from the POST's answer", timeout=2)
    found["redrawMs"] = round((time.time() - clicked) * 1000)
    page.unroute("**/status")
    page.unroute("**/switches")
    eventually(lambda: reason("qoder", "q-second") == "disabled", "Disable")
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

    # Reload from the panel (Windows has no SIGHUP): the file is read
    # again and the page says when.
    reloads = status()["config"]["reloads"]
    button("reload config").click()
    eventually(lambda: status()["config"]["reloads"] == reloads + 1, "the panel's reload")
    found["reloaded"] = eventually(lambda: testid(page, "reload-note").inner_text(), "the reload note")
    assert found["reloaded"].startswith("reloaded at "), found["reloaded"]

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

    # The aborted reads while /status was unreachable are the test's own.
    found["console"] = [m for m in console if "ERR_FAILED" not in m]
    found["foreign"] = foreign
    return found


def zh_words(page, found):
    """The Chinese page: breaker state, call kind and outcome in Chinese too."""
    breaker = testid(page, "route-qoder-q-second").locator(".tag").first.inner_text()
    kind = page.locator('[data-testid="calls"] [data-kind="fallback"]').first.inner_text()
    outcome = testid(page, "calls").locator(".tag.ok").first.inner_text()
    found["zhWords"] = [breaker, kind, outcome]
    assert found["zhWords"] == ["闭合", "直连", "成功"], found["zhWords"]
    text = page.locator("main").inner_text()
    for word in ("closed", "configured", "fallback", "direct", "tries", "answered", "calls", "per 15 s"):
        assert not re.search(rf"\b{word}\b", text), f"{word!r} left in English on the Chinese page"


def run_many(browser, params):
    """400 routes on qoder, none on trae: the lists collapse past 20 with a
    filter box, a route past them is found and steered, the empty shim
    says so with its controls off; pictures at 400 routes."""
    base, shots = params["base"], params["shots"]
    status = lambda: get(base + "/status")
    found = {}
    context = browser.new_context(timezone_id=ZONE, locale="en-US", viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.goto(base + "/ui")
    eventually(lambda: testid(page, "more-qoder").count() >= 1, "the long lists collapse")
    # The config's zone differs from the browser's: the page names both.
    found["zoneNote"] = testid(page, "zone-note").inner_text()
    assert "Europe/Berlin" in found["zoneNote"] and ZONE in found["zoneNote"], found["zoneNote"]
    n = len(status()["chain"]["routes"]["qoder"])
    found["routes"] = n
    assert page.locator('[data-testid="effective-qoder"] > li').count() == 20
    assert page.locator('[data-testid^="route-qoder-"]').count() == 20
    found["more"] = testid(page, "more-qoder").first.inner_text()
    assert f"20 of {n} routes" in found["more"], found["more"]
    # The empty shim: said, and its controls off.
    assert testid(page, "no-routes-trae").inner_text() == "no routes configured"
    assert page.get_by_role("button", name="Adopt measured order trae", exact=True).is_disabled()
    page.screenshot(path=os.path.join(shots, "panel-400-en.png"), full_page=True)
    # The filter box finds a route past the first 20, and it can be steered.
    last = f"r-{n - 1:03}"
    box = page.get_by_label("filter routes")
    box.fill(last)
    eventually(lambda: testid(page, f"route-qoder-{last}").count() == 1, "the filter finds the last route")
    assert page.locator('[data-testid^="route-qoder-"]').count() == 1
    page.get_by_role("button", name=f"Disable {last}", exact=True).click()
    eventually(lambda: page.get_by_role("button", name=f"Enable {last}", exact=True).count() == 1, "the filtered route is disabled")
    assert next(r for r in status()["chain"]["routes"]["qoder"] if r["name"] == last)["disabled"]
    page.get_by_role("button", name=f"Enable {last}", exact=True).click()
    eventually(lambda: not next(r for r in status()["chain"]["routes"]["qoder"] if r["name"] == last)["disabled"], "enabled again")
    box.fill("")
    # Show all, then the first 20 again.
    page.get_by_role("button", name=f"show all {n}").first.click()
    eventually(lambda: page.locator('[data-testid^="route-qoder-"]').count() == n, "show all")
    page.get_by_role("button", name="show the first 20").first.click()
    eventually(lambda: page.locator('[data-testid^="route-qoder-"]').count() == 20, "the first 20 again")
    # In Chinese.
    page.get_by_role("button", name="简体中文", exact=True).click()
    eventually(lambda: testid(page, "no-routes-trae").inner_text() == "未配置线路", "the empty shim in Chinese")
    assert "今日" in testid(page, "zone-note").inner_text()
    page.screenshot(path=os.path.join(shots, "panel-400-zh.png"), full_page=True)
    found["console"] = console
    context.close()
    return found
