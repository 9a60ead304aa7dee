"""The savings card in a real Chromium, against a running shimgate whose
ledger holds ten earlier days (a savings file the Rust test wrote) and
today's two conversations, one the compressor shortened and one it only
made longer:

- today's figures equal /status `savings.today`, written as the page's
  language writes numbers, the net signed;
- the chart has the last 14 days in the config's zone, a bar for each day
  with calls (up for a net saving, down for a net cost), a legend and
  the days' dates;
- the conversation that saved most and the one that cost more than it
  saved are each in their table;
- the method is named;
- in Chinese the card is Chinese, numbers and dates included;
- pictures of the card in English and Chinese (`params["shots"]`).
"""
import json
import os
import re
import urllib.request

from panel import ZONE, eventually, testid

FIELDS = ["agentTokens", "sentTokens", "savedTokens", "cachedTokens", "sideCalls", "sideTokens", "netTokens"]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def written(n, signed, sep=","):
    text = f"{abs(n):,}".replace(",", sep)
    if n < 0:
        return "-" + text
    return ("+" + text) if signed and n > 0 else text


def run(browser, params):
    base, shots = params["base"], params["shots"]
    savings = lambda: get(base + "/status")["savings"]
    found = {}
    context = browser.new_context(timezone_id=ZONE, locale="en-US", viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.goto(base + "/ui")
    sv = savings()
    today = sv["today"]
    assert today["calls"] == 6, today

    def figures_match():
        for f in FIELDS:
            want = written(today[f], f in ("savedTokens", "netTokens"))
            got = testid(page, f"savings-today-{f}").inner_text().replace("\u2212", "-")
            if got != want:
                return None
        return True

    eventually(figures_match, "today's figures equal /status")
    found["today"] = {f: testid(page, f"savings-today-{f}").inner_text() for f in FIELDS}
    card = testid(page, "savings")
    assert today["date"] in card.inner_text() and "Asia/Shanghai" in card.inner_text(), card.inner_text()

    # The chart: 14 days, a bar per day with calls, the sign as the colour.
    chart = testid(page, "savings-chart")
    bars = chart.locator("rect")
    days = {d["date"]: d for d in sv["days"]}
    assert bars.count() == len(days) == 11, (bars.count(), sorted(days))
    for i in range(bars.count()):
        bar = bars.nth(i)
        day = days[bar.get_attribute("data-date")]
        want = "up" if day["netTokens"] >= 0 else "down"
        assert bar.get_attribute("class") == want, (day, bar.get_attribute("class"))
    ticks = chart.locator("text.tick").all_text_contents()
    assert today["date"][5:] in ticks, ticks
    caption = chart.locator("figcaption").inner_text()
    assert "saved" in caption and "cost more" in caption and "last 14 days" in caption, caption
    found["bars"] = {"count": bars.count(), "down": chart.locator("rect.down").count(), "ticks": ticks}
    assert found["bars"]["down"] == 2, found["bars"]

    # The conversations.
    best = testid(page, "savings-best").inner_text()
    worst = testid(page, "savings-worst").inner_text()
    assert "conv-long" in best and "conv-short" not in best, best
    assert "conv-short" in worst and "conv-long" not in worst, worst
    conv = {c["id"]: c for c in sv["conversations"]}
    assert written(conv["conv-long"]["netTokens"], True) in best, best
    assert written(conv["conv-short"]["netTokens"], True) in worst.replace("\u2212", "-"), worst
    found["best"] = best.split("\n")[-1]
    found["worst"] = worst.split("\n")[-1]
    method = testid(page, "savings-method").inner_text()
    assert "provider" in method and "per character" in method, method
    assert testid(page, "savings-method").get_attribute("title") == "provider-ratio"
    page.wait_for_timeout(1200)
    card.screenshot(path=os.path.join(shots, "savings-en.png"))

    # Chinese.
    page.get_by_role("button", name="简体中文", exact=True).click()
    eventually(lambda: page.locator("#h-savings").inner_text() == "节省", "the Chinese card")
    text = card.inner_text()
    for word in ("今日", "净节省", "节省最多的会话", "得不偿失的会话", "近 14 天", "服务商"):
        assert word in text, f"{word!r} missing from the Chinese card: {text}"
    for word in ("Today", "saved", "net", "calls", "agent", "sent", "cost more", "last 14 days", "provider"):
        assert not re.search(rf"\b{word}\b", text), f"{word!r} left in English on the Chinese card: {text}"
    found["zh"] = [page.locator("#h-savings").inner_text(), testid(page, "savings-today").locator("h3").inner_text()]
    page.wait_for_timeout(300)
    card.screenshot(path=os.path.join(shots, "savings-zh.png"))
    found["console"] = console
    context.close()
    return found
