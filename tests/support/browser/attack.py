"""What a web page the user opens can try against shimgate's admin
surface (docs/security.md), in a real Chromium:

- a page on another loopback port: no-cors fetches and form posts (into
  frames and one top-level) at every control, and cors reads of every
  admin path;
- a DNS-rebinding page: its origin is the attacker's name on shimgate's
  own port (the first load is answered by the test, as the attacker's
  server would before the name is rebound to 127.0.0.1 with
  --host-resolver-rules), so its reads and writes are same-origin.

It reports what each attempt saw; the Rust test checks that shimgate
changed nothing and gave nothing away.
"""
import http.server
import json
import threading

ATTACK_JS = """
async function attack(targets, controls, reads) {
  const out = {posts: 0, forms: 0, reads: []};
  for (const t of targets) {
    for (const [path, body] of controls) {
      try { await fetch(t + path, {method: "POST", mode: "no-cors", body}); } catch (e) {}
      out.posts++;
    }
    for (const path of reads) {
      try {
        const r = await fetch(t + path);
        out.reads.push({url: t + path, status: r.status, text: await r.text()});
      } catch (e) {
        out.reads.push({url: t + path, blocked: String(e)});
      }
    }
  }
  const posted = [];
  let n = 0;
  for (const t of targets) {
    for (const [path, body] of controls) {
      const name = "f" + (n++);
      const frame = document.createElement("iframe");
      frame.name = name;
      document.body.appendChild(frame);
      posted.push(new Promise(done => { frame.onload = done; setTimeout(done, 5000); }));
      const form = document.createElement("form");
      form.method = "POST";
      form.enctype = "text/plain";
      form.action = t + path;
      form.target = name;
      const field = document.createElement("input");
      field.name = "x";
      field.value = body;
      form.appendChild(field);
      document.body.appendChild(form);
      form.submit();
      out.forms++;
    }
  }
  await Promise.all(posted);
  return out;
}
"""

REBIND_JS = """
async function rebind(controls, reads) {
  const out = [];
  for (const path of reads) {
    try {
      const r = await fetch(path);
      out.push({path, status: r.status, text: await r.text()});
    } catch (e) { out.push({path, blocked: String(e)}); }
  }
  for (const [path, body] of controls) {
    try {
      const r = await fetch(path, {method: "POST", body, headers: {"content-type": "application/json"}});
      out.push({path, status: r.status, text: await r.text()});
    } catch (e) { out.push({path, blocked: String(e)}); }
  }
  return out;
}
"""


def page_html(script):
    return f"<!doctype html><html><body><h1>free stickers</h1><script>{script}</script></body></html>"


def top_level_form(action):
    return (
        "<!doctype html><html><body><form id=f method=POST enctype=text/plain "
        f"action='{action}'><input name=x value=1></form>"
        "<script>document.getElementById('f').submit()</script></body></html>"
    )


class Pages(http.server.BaseHTTPRequestHandler):
    """The attacker's own server, on another loopback port."""

    pages = {}

    def do_GET(self):
        body = self.pages.get(self.path.split("?")[0], "").encode()
        self.send_response(200 if body else 404)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def run(browser, params):
    targets, controls, reads = params["targets"], params["controls"], params["reads"]
    Pages.pages = {
        "/attack.html": page_html(ATTACK_JS),
        "/top.html": top_level_form(targets[0] + "/routes/reset"),
    }
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    attacker = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        page = browser.new_page()
        page.goto(attacker + "/attack.html")
        cross = page.evaluate("([t, c, r]) => attack(t, c, r)", [targets, controls, reads])
        page.goto(attacker + "/top.html")
        page.wait_for_url(targets[0] + "/routes/reset", timeout=10000)
        top = page.content()
        page.close()
    finally:
        server.shutdown()

    name, port = params["rebind"]["name"], params["rebind"]["port"]
    origin = f"http://{name}:{port}"
    context = browser.new_context()
    page = context.new_page()
    page.route(
        origin + "/attack.html",
        lambda route: route.fulfill(status=200, content_type="text/html", body=page_html(REBIND_JS)),
    )
    page.goto(origin + "/attack.html")
    rebound = page.evaluate("([c, r]) => rebind(c, r)", [controls, reads])
    context.close()
    return {"attacker": attacker, "cross": cross, "top": top, "rebound": rebound}
