"""Drives the system Chromium (headless, Playwright for Python) for the
end-to-end tests: `run.py SCENARIO` reads its parameters as one JSON object
on stdin and prints its findings as one JSON object on the last line of
stdout; an assertion that fails exits non-zero with the reason on stderr.

Playwright never downloads a browser here: it launches the Chromium that
`SHIMGATE_CHROMIUM` names (Debian's /usr/bin/chromium by default).
"""
import json
import os
import sys

from playwright.sync_api import sync_playwright

import attack
import capture
import panel
import savings

SCENARIOS = {"attack": attack.run, "capture": capture.run, "panel": panel.run, "many": panel.run_many, "savings": savings.run}

# The flags the workplace's closed network needs (no background fetches),
# plus: Local Network Access off, so the tests see what a browser without
# it (Firefox, Safari, older Chromium) lets a page do; shimgate must hold
# on its own.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests",
]


def main():
    scenario = SCENARIOS[sys.argv[1]]
    params = json.load(sys.stdin)
    chromium = os.environ.get("SHIMGATE_CHROMIUM", "/usr/bin/chromium")
    flags = FLAGS + params.get("extraFlags", [])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=flags)
        try:
            result = scenario(browser, params)
        finally:
            browser.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
