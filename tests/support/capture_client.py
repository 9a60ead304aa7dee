"""One HTTPS request through the proxy HTTPS_PROXY names, made by a Python
HTTP stack as an application would make it: `httpx` (which reads
HTTPS_PROXY and SSL_CERT_FILE) or `requests` (HTTPS_PROXY and
REQUESTS_CA_BUNDLE). Prints one JSON line: the status, headers and body
(base64), or the error.

    python capture_client.py httpx|requests URL METHOD HEADERS_JSON [BODY_FILE]
"""
import base64
import json
import sys


def main():
    lib, url, method, headers = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    body = open(sys.argv[5], "rb").read() if len(sys.argv) > 5 else None
    try:
        if lib == "httpx":
            import httpx

            r = httpx.request(method, url, headers=headers, content=body, timeout=120)
            status, got, data = r.status_code, dict(r.headers), r.content
        else:
            import requests

            r = requests.request(method, url, headers=headers, data=body, timeout=120)
            status, got, data = r.status_code, dict(r.headers), r.content
    except Exception as e:  # the test shows what failed
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(3)
    print(json.dumps({"status": status, "headers": got, "body": base64.b64encode(data).decode()}))


if __name__ == "__main__":
    main()
