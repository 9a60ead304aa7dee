#!/usr/bin/env python3
"""Test codec co-process for shimgate's qoder `exec` codec (stdlib only).

Protocol, one JSON object per line on stdin and stdout:
  in:  {"ask": {...}, "route": {"name": ..., "url": ...}, "path": "/algo/...?Encode=1"}
  out: {"url": "<route url + path>", "headers": {...}, "body": "<base64 of the encoded body>"}
   or: {"error": "<reason>"}

The body uses the public qoder encoding (base64, positional alphabet swap,
`=` -> `$`, thirds swapped). The signature is a *test* signature, not
qoder's: lowercase hex HMAC-SHA256, key $QODER_TEST_SECRET (default
"shimgate-test"), over "<unix seconds>\n<encoded body>\n<path>", sent as
`Authorization: Bearer COSY.<base64 payload with a fresh requestId>.<sig>`
with `Cosy-Date`. Every call signs afresh, so each retry gets a new
requestId and signature. shimgate_shim_qoder::codec decodes and checks it.
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import uuid

STANDARD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
CUSTOM = "_doRTgHZBKcGVjlvpC,@aFSx#DPuNJme&i*MzLOEn)sUrthbf%Y^w.(kIQyXqWA!"
TO_CUSTOM = str.maketrans(STANDARD + "=", CUSTOM + "$")
DEFAULT_PATH = (
    "/algo/api/v2/service/pro/sse/agent_chat_generation"
    "?FetchKeys=llm_model_result&AgentId=agent_common&Encode=1"
)


def encode_body(plain: bytes) -> str:
    """Base64, alphabet swap, then last third + middle + first third."""
    std = base64.b64encode(plain).decode("ascii")
    third = len(std) // 3
    rotated = std[len(std) - third:] + std[third:len(std) - third] + std[:third]
    return rotated.translate(TO_CUSTOM)


def secret() -> bytes:
    return os.environ.get("QODER_TEST_SECRET", "shimgate-test").encode("utf-8")


def handle(request: dict) -> dict:
    ask = request.get("ask")
    if not isinstance(ask, dict):
        return {"error": "request has no ask object"}
    route = request.get("route")
    if not isinstance(route, dict) or not isinstance(route.get("url"), str):
        return {"error": "request has no route url"}
    path = request.get("path") or DEFAULT_PATH
    if not isinstance(path, str) or not path.startswith("/"):
        return {"error": "path must start with /"}

    plain = json.dumps(ask, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    encoded = encode_body(plain)
    date = str(int(time.time()))
    signed = f"{date}\n{encoded}\n{path}".encode("utf-8")
    signature = hmac.new(secret(), signed, hashlib.sha256).hexdigest()
    payload = json.dumps(
        {
            "version": "v1",
            "requestId": str(uuid.uuid4()),
            "info": "shimgate-test",
            "cosyVersion": "shimgate-test",
            "ideVersion": "",
        },
        separators=(",", ":"),
    )
    payload_b64 = base64.b64encode(payload.encode("utf-8")).decode("ascii")
    model_key = ""
    model_config = ask.get("model_config")
    if isinstance(model_config, dict) and isinstance(model_config.get("key"), str):
        model_key = model_config["key"]
    headers = {
        "Accept": "text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer COSY.{payload_b64}.{signature}",
        "Cosy-Date": date,
        "Cosy-Version": "shimgate-test",
    }
    if model_key:
        headers["X-Model-Key"] = model_key
    return {
        "url": route["url"].rstrip("/") + path,
        "headers": headers,
        "body": base64.b64encode(encoded.encode("ascii")).decode("ascii"),
    }


def main() -> int:
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        line = line.strip()
        if not line:
            continue
        try:
            reply = handle(json.loads(line))
        except Exception as error:  # one bad line must not end the co-process
            reply = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(reply, ensure_ascii=False) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
