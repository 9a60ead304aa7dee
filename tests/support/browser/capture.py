"""The capture listener in a real Chromium:

- the panel's capture card: its counters equal /status `capture`, each
  host has its row, a host tunnelled after its client refused the
  certificate says so and why; in Chinese the card is Chinese; pictures
  of it in both languages (`params["shots"]`);
- a web page on another loopback port tries to use the capture listener
  (cors reads, no-cors posts, a form post into a frame): it reads
  nothing, and each attempt is refused as not a proxy request. (No page
  can send CONNECT or an absolute-form target; what a page's fetch to
  the port is, an origin-form request, is what the listener refuses.)
"""
import http.server
import threading

from attack import Pages, page_html
from panel import ZONE, eventually, get, testid

USE_JS = """
async function use(capture) {
  const out = {reads: [], posts: 0, forms: 0};
  for (const path of ["/", "/status", "/metrics", "/ui"]) {
    try {
      const r = await fetch(capture + path);
      out.reads.push({path, status: r.status, text: await r.text()});
    } catch (e) {
      out.reads.push({path, blocked: String(e)});
    }
  }
  for (const path of ["/", "/reload"]) {
    try { await fetch(capture + path, {method: "POST", mode: "no-cors", body: "x"}); } catch (e) {}
    out.posts++;
  }
  const frame = document.createElement("iframe");
  frame.name = "f";
  document.body.appendChild(frame);
  const loaded = new Promise(done => { frame.onload = done; setTimeout(done, 5000); });
  const form = document.createElement("form");
  form.method = "POST";
  form.enctype = "text/plain";
  form.action = capture + "/";
  form.target = "f";
  document.body.appendChild(form);
  form.submit();
  out.forms++;
  await loaded;
  return out;
}
"""


def card(page, base, lang, found, shots):
    status = get(base + "/status")["capture"]
    eventually(lambda: testid(page, "capture-card").is_visible(), "the capture card")
    for key, value in [
        ("capIntercepted", status["connections"]["intercepted"]),
        ("capTunnelled", status["connections"]["tunnelled"]),
        ("capHanded", status["requests"]["handed"]),
        ("capRefusals", status["clientRefusals"]),
    ]:
        eventually(lambda: testid(page, f"capture-{key}").inner_text() == str(value), f"{lang} {key} = {value}")
    for host in status["hosts"]:
        row = testid(page, f"capture-row-{host['host']}")
        eventually(lambda: row.is_visible(), f"a row for {host['host']}")
    tunnelled = [h for h in status["hosts"] if h["tunnelledSince"]]
    for h in tunnelled:
        text = testid(page, f"capture-row-{h['host']}").inner_text()
        assert h["why"] in text, text
    found[lang] = {
        "title": page.locator("#h-capture").inner_text(),
        "modes": {h["host"]: testid(page, f"capture-mode-{h['host']}").inner_text() for h in status["hosts"]},
        "card": testid(page, "capture-card").inner_text(),
    }
    testid(page, "capture-card").screenshot(path=f"{shots}/capture-{lang}.png")


def run(browser, params):
    base, capture, shots = params["base"], params["capture"], params["shots"]
    found = {}
    context = browser.new_context(timezone_id=ZONE, locale="en-US", viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(base + "/ui?lang=en")
    card(page, base, "en", found, shots)
    page.click("#lang-zh")
    card(page, base, "zh", found, shots)
    context.close()
    assert not errors, errors

    Pages.pages = {"/use.html": page_html(USE_JS)}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    attacker = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        page = browser.new_page()
        page.goto(attacker + "/use.html")
        found["page"] = page.evaluate("(c) => use(c)", capture)
        page.close()
    finally:
        server.shutdown()
    return found
