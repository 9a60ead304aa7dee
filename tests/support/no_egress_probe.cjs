// The proof that no_egress.cjs refuses what it must, safe even when it
// is broken. Loaded first with `--require` (before the preload), it swaps
// every network primitive the preload wraps for a stand-in that never
// touches the network and logs that it was reached. Its `main()` (run
// with `-e "require(process.argv[1]).main()" <this file>`) then tries each
// kind of connection (TCP, TLS, https, fetch, http2, UDP, every DNS API)
// to addresses past loopback, and once to a loopback listener, printing
// one JSON line per attempt. The test reads the lines, the stand-ins' log
// (only the loopback attempt may reach them) and the preload's refusals.
'use strict';

const net = require('node:net');
const dgram = require('node:dgram');
const dns = require('node:dns');

const REACHED = process.env.SHIMGATE_PROBE_REACHED;

{
  // The stand-ins, installed when loaded (with --require, before the preload).
  const fs = require('node:fs');
  const reached = (what, host) => fs.appendFileSync(REACHED, JSON.stringify({ what, host: String(host) }) + '\n');
  const standInError = () => Object.assign(new Error('stand-in'), { code: 'ESTANDIN' });
  const realConnect = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function connect(...args) {
    let first = Array.isArray(args[0]) ? args[0][0] : args[0];
    const host = first && typeof first === 'object' ? first.host : args[1];
    reached('connect', host);
    // Only loopback goes on to the real connect (the probe's own listener).
    if (host === '127.0.0.1') return realConnect.apply(this, args);
    process.nextTick(() => this.destroy(standInError()));
    return this;
  };
  dgram.Socket.prototype.send = function send(msg, ...rest) {
    reached('udp-send', rest.find((a) => typeof a === 'string'));
    const cb = rest.find((a) => typeof a === 'function');
    if (cb) process.nextTick(() => cb(standInError()));
  };
  dgram.Socket.prototype.connect = function connect(port, address) {
    reached('udp-connect', address);
  };
  const realLookup = dns.lookup;
  dns.lookup = function lookup(host, o, cb) {
    reached('dns-lookup', host);
    // Only loopback goes on (the probe's own listener binds 127.0.0.1).
    if (host === '127.0.0.1') return realLookup.apply(this, arguments);
    process.nextTick(() => (cb || o)(standInError()));
    return {};
  };
  dns.promises.lookup = async (host) => { reached('dns-lookup', host); throw new Error('stand-in'); };
  for (const name of ['resolve', 'resolve4', 'resolve6', 'resolveTxt', 'reverse']) {
    const standIn = (host, ...rest) => {
      reached(`dns-${name}`, host);
      const cb = rest.find((a) => typeof a === 'function');
      if (cb) cb(new Error('stand-in'));
    };
    dns[name] = standIn;
    dns.Resolver.prototype[name] = standIn;
    dns.promises[name] = async (host) => { reached(`dns-${name}`, host); throw new Error('stand-in'); };
    dns.promises.Resolver.prototype[name] = dns.promises[name];
  }
}

// The attempts (TEST-NET and .invalid names, which
// no network would route or resolve anyway).
const tls = require('node:tls');
const https = require('node:https');
const http2 = require('node:http2');

const outcome = (p) => p.then(() => 'allowed', (e) => (e && (e.code || (e.cause && e.cause.code))) || String(e));
const viaEvents = (emitter) => new Promise((resolve, reject) => {
  emitter.on('error', reject);
  emitter.on('connect', resolve);
  emitter.on('secureConnect', resolve);
  emitter.on('response', resolve);
});

async function main() {
  const attempts = {
    'net.connect': () => viaEvents(net.connect(443, '192.0.2.1')),
    'net.createConnection(options)': () => viaEvents(net.createConnection({ host: 'egress.invalid', port: 80 })),
    'tls.connect': () => viaEvents(tls.connect({ host: '192.0.2.2', port: 443, servername: 'x.invalid' })),
    'https.get': () => viaEvents(https.get('https://192.0.2.3/')),
    fetch: () => fetch('https://egress.invalid/'),
    'http2.connect': () => viaEvents(http2.connect('https://192.0.2.4')),
    'dgram.send': () => new Promise((resolve, reject) => {
      const s = dgram.createSocket('udp4');
      s.on('error', reject);
      s.send('x', 53, '192.0.2.5', (e) => (e ? reject(e) : resolve()));
    }),
    'dns.lookup': () => new Promise((resolve, reject) => dns.lookup('egress.invalid', (e) => (e ? reject(e) : resolve()))),
    'dns.promises.lookup': () => dns.promises.lookup('egress.invalid'),
    'dns.resolve4': () => new Promise((resolve, reject) => dns.resolve4('egress.invalid', (e) => (e ? reject(e) : resolve()))),
    'dns.promises.resolveTxt': () => dns.promises.resolveTxt('egress.invalid'),
    'new dns.Resolver().resolve6': () => new Promise((resolve, reject) => new dns.Resolver().resolve6('egress.invalid', (e) => (e ? reject(e) : resolve()))),
  };
  for (const [name, attempt] of Object.entries(attempts)) {
    console.log(JSON.stringify({ attempt: name, outcome: await outcome(attempt()) }));
  }
  // Loopback passes: a listener of our own answers.
  const server = net.createServer((s) => s.end('loopback ok')).listen(0, '127.0.0.1');
  await new Promise((r) => server.on('listening', r));
  const said = await new Promise((resolve) => {
    const c = net.connect(server.address().port, '127.0.0.1');
    let text = '';
    c.on('data', (d) => { text += d; });
    c.on('end', () => resolve(text));
    c.on('error', (e) => resolve(e.code));
  });
  console.log(JSON.stringify({ attempt: 'loopback', outcome: said }));
  server.close();
}

module.exports = { main };
