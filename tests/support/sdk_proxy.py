#!/usr/bin/env python3
"""A compression-proxy stand-in that reads the return leg with the official
openai Python SDK.

It listens on 127.0.0.1 (a free port, printed as the first stdout line),
takes `POST /{shim}/{rid}/chat/completions`, forwards the body with the
SDK's streaming client (base_url = <upstream>/{shim}/{rid}) and re-emits
every chunk the SDK parsed as one `data:` frame, then `data: [DONE]`. Any
SDK exception is recorded; `GET /errors` lists them, so a test fails when
the SDK could not read what shimgate sent.

Usage: sdk_proxy.py <upstream base URL>
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

UPSTREAM = sys.argv[1].rstrip("/")
ERRORS = []
CHUNKS = [0]
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):
        with LOCK:
            body = json.dumps({"errors": ERRORS, "chunks": CHUNKS[0]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        path = self.path.split("?")[0]
        suffix = "/chat/completions"
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        client = openai.OpenAI(base_url=UPSTREAM + path[: -len(suffix)], api_key="unused", max_retries=0)
        known = {"model", "messages", "tools", "tool_choice", "temperature", "top_p", "max_tokens", "stop"}
        kwargs = {k: v for k, v in body.items() if k in known}
        extra = {k: v for k, v in body.items() if k not in known and k != "stream"}
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        try:
            stream = client.chat.completions.create(stream=True, extra_body=extra, **kwargs)
            for chunk in stream:
                with LOCK:
                    CHUNKS[0] += 1
                frame = chunk.model_dump_json(exclude_unset=True, by_alias=True)
                self.wfile.write(b"data: " + frame.encode() + b"\n\n")
                self.wfile.flush()
        except Exception as exc:  # noqa: BLE001 - every SDK failure is a test failure
            with LOCK:
                ERRORS.append(f"{type(exc).__name__}: {exc}")
            error = json.dumps({"error": {"message": str(exc), "type": "sdk_error"}})
            self.wfile.write(b"data: " + error.encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
