// One HTTPS request through the proxy `HTTPS_PROXY` names, made with
// Node's own http, https and tls modules (what Node clients build on):
// `CONNECT host:port`, then TLS for the host, trusting Node's roots plus
// NODE_EXTRA_CA_CERTS. Prints one JSON line: the status, headers and body
// (base64), or the error.
//
//   node capture_client.cjs URL METHOD HEADERS_JSON [BODY_FILE]
"use strict";
const http = require("http");
const https = require("https");
const tls = require("tls");
const fs = require("fs");

const [url, method, headersJson, bodyFile] = process.argv.slice(2);
const target = new URL(url);
const proxy = new URL(process.env.HTTPS_PROXY || process.env.https_proxy);
const port = Number(target.port || 443);
const authority = `${target.hostname}:${port}`;

function fail(what) {
  console.log(JSON.stringify({ error: String(what) }));
  process.exit(3);
}

const connect = http.request({
  host: proxy.hostname,
  port: Number(proxy.port),
  method: "CONNECT",
  path: authority,
  headers: { host: authority },
});
connect.on("error", fail);
connect.on("connect", (res, socket) => {
  if (res.statusCode !== 200) {
    console.log(JSON.stringify({ connect: res.statusCode }));
    process.exit(2);
  }
  const req = https.request(
    {
      host: target.hostname,
      port,
      method,
      path: target.pathname + target.search,
      headers: JSON.parse(headersJson),
      // No `agent`: then Node uses this socket and looks nothing up.
      createConnection: () => tls.connect({ socket, servername: target.hostname }),
    },
    (r) => {
      const chunks = [];
      r.on("data", (c) => chunks.push(c));
      r.on("end", () => {
        console.log(
          JSON.stringify({
            status: r.statusCode,
            headers: r.headers,
            body: Buffer.concat(chunks).toString("base64"),
          })
        );
        process.exit(0);
      });
    }
  );
  req.on("error", fail);
  if (bodyFile) req.write(fs.readFileSync(bodyFile));
  req.end();
});
connect.end();
