// The no-egress safety net for Node programs the tests run (the Qoder CLI):
// loaded with `node --require <this file>` (or NODE_OPTIONS=--require=…, so
// every Node child and worker loads it too), it refuses every socket
// connect, UDP send and DNS query that is not for loopback, and appends one
// JSON line per refusal (kind, host, port, the head of the stack) to the
// file named by SHIMGATE_NO_EGRESS_LOG. The test that ran the program fails
// when that file is not empty: a refusal means the program tried to leave
// the machine, whatever it then did with the error.
//
// It patches the functions every Node network path goes through:
// net.Socket.prototype.connect (net.connect, tls.connect, http, https,
// http2 and undici/fetch all open their sockets with it), dgram sends and
// connects, dns.lookup and the c-ares resolvers (module functions, the
// promises API and both Resolver classes; these answer a loopback name
// themselves, since c-ares would ask the name server even for 127.0.0.1).
// A refused connect fails the way an unreachable host does (ECONNREFUSED
// on the socket), a refused lookup with ENOTFOUND, so the program goes on
// and the test sees what it did.
'use strict';

const fs = require('node:fs');
const net = require('node:net');
const dgram = require('node:dgram');
const dns = require('node:dns');

const LOG = process.env.SHIMGATE_NO_EGRESS_LOG;

/** Loopback: 127.0.0.0/8, ::1 (also IPv4-mapped), `localhost`. */
function isLoopback(host) {
  if (host === undefined || host === null || host === '') return true; // Node's default is localhost
  let h = String(host).toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h.endsWith('.')) h = h.slice(0, -1);
  if (h === 'localhost') return true;
  switch (net.isIP(h)) {
    case 4:
      return h.startsWith('127.');
    case 6:
      if (h.startsWith('::ffff:')) return isLoopback(h.slice(7));
      return h === '::1' || h === '0:0:0:0:0:0:0:1';
    default:
      return false;
  }
}

/** Appends one refusal to the log (stderr when no log is named). */
function record(kind, host, port) {
  const stack = (new Error().stack || '').split('\n').slice(3, 9).map((l) => l.trim());
  const line = JSON.stringify({ kind, host: String(host), port: port ?? null, pid: process.pid, stack }) + '\n';
  try {
    if (LOG) fs.appendFileSync(LOG, line);
    else process.stderr.write(`no-egress refused: ${line}`);
  } catch (_) {
    process.stderr.write(`no-egress refused (log not writable): ${line}`);
  }
}

function refusal(code, syscall, host, port) {
  const err = new Error(`${syscall} ${code} ${host}${port ? ':' + port : ''} (refused by the tests' no-egress preload: only loopback is allowed)`);
  err.code = code;
  err.errno = code === 'ENOTFOUND' ? -3008 : -111;
  err.syscall = syscall;
  err.hostname = String(host);
  return err;
}

// --- TCP (and everything built on it) ---------------------------------------

/** The host and port of a `Socket#connect` call, or null for a pipe / unix socket. */
function connectTarget(args) {
  let first = args[0];
  // net.connect normalises its arguments and passes them on as an array.
  if (Array.isArray(first)) first = first[0];
  if (first !== null && typeof first === 'object') {
    if (first.path !== undefined && first.path !== null) return null;
    return { host: first.host ?? 'localhost', port: first.port };
  }
  if (typeof first === 'string' && !/^\d+$/.test(first)) return null; // a pipe path
  return { host: typeof args[1] === 'string' ? args[1] : 'localhost', port: first };
}

const originalConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function connect(...args) {
  const target = connectTarget(args);
  if (target === null || isLoopback(target.host)) return originalConnect.apply(this, args);
  record('connect', target.host, target.port);
  const err = refusal('ECONNREFUSED', 'connect', target.host, target.port);
  this.connecting = true;
  process.nextTick(() => this.destroy(err));
  return this;
};

// --- UDP ----------------------------------------------------------------------

const originalSend = dgram.Socket.prototype.send;
dgram.Socket.prototype.send = function send(msg, ...rest) {
  // send(msg[, offset, length][, port][, address][, callback])
  const callback = typeof rest[rest.length - 1] === 'function' ? rest[rest.length - 1] : undefined;
  const plain = rest.filter((a) => typeof a !== 'function');
  const [port, address] = typeof plain[0] === 'number' && typeof plain[1] === 'number' && plain.length >= 3
    ? [plain[2], plain[3]]
    : [plain[0], plain[1]];
  if (port === undefined || isLoopback(address)) return originalSend.call(this, msg, ...rest);
  record('udp-send', address, port);
  const err = refusal('ECONNREFUSED', 'send', address, port);
  process.nextTick(() => (callback ? callback(err) : this.emit('error', err)));
};

const originalUdpConnect = dgram.Socket.prototype.connect;
dgram.Socket.prototype.connect = function connect(port, address, callback) {
  const host = typeof address === 'string' ? address : undefined;
  if (isLoopback(host)) return originalUdpConnect.apply(this, arguments);
  record('udp-connect', host, port);
  const err = refusal('ECONNREFUSED', 'connect', host, port);
  const cb = typeof address === 'function' ? address : callback;
  process.nextTick(() => (cb ? cb(err) : this.emit('error', err)));
};

// --- DNS ----------------------------------------------------------------------

const originalLookup = dns.lookup;
dns.lookup = function lookup(hostname, options, callback) {
  const cb = typeof options === 'function' ? options : callback;
  if (isLoopback(hostname)) return originalLookup.apply(this, arguments);
  record('dns-lookup', hostname, null);
  const err = refusal('ENOTFOUND', 'getaddrinfo', hostname);
  process.nextTick(() => cb(err));
  return {};
};

const originalPromisesLookup = dns.promises.lookup;
dns.promises.lookup = function lookup(hostname, ...rest) {
  if (isLoopback(hostname)) return originalPromisesLookup.call(this, hostname, ...rest);
  record('dns-lookup', hostname, null);
  return Promise.reject(refusal('ENOTFOUND', 'getaddrinfo', hostname));
};

const originalLookupService = dns.lookupService;
dns.lookupService = function lookupService(address, port, callback) {
  if (isLoopback(address)) return originalLookupService.apply(this, arguments);
  record('dns-lookupService', address, port);
  process.nextTick(() => callback(refusal('ENOTFOUND', 'getnameinfo', address, port)));
};

const RESOLVERS = [
  'resolve', 'resolve4', 'resolve6', 'resolveAny', 'resolveCaa', 'resolveCname', 'resolveMx',
  'resolveNaptr', 'resolveNs', 'resolvePtr', 'resolveSoa', 'resolveSrv', 'resolveTxt', 'reverse',
];

/**
 * What a resolver says for a loopback name without asking any server: the
 * address itself for its own family (`localhost` is 127.0.0.1 and ::1),
 * else "no data".
 */
function loopbackAnswer(name, hostname) {
  const h = String(hostname).toLowerCase();
  const v4 = net.isIP(h) === 4 ? h : h === 'localhost' ? '127.0.0.1' : null;
  const v6 = net.isIP(h) === 6 ? h : h === 'localhost' ? '::1' : null;
  const found = name === 'resolve6' ? v6 : name === 'resolve4' || name === 'resolve' ? v4 : null;
  if (found) return [null, [found]];
  const err = new Error(`query${name} ENODATA ${hostname}`);
  err.code = 'ENODATA';
  return [err, undefined];
}

/**
 * A resolver function, callback style or promise style, that answers
 * loopback names itself (a c-ares query for any name goes to the
 * configured name servers) and refuses every other name.
 */
function refusingResolver(name, promised) {
  return function refused(hostname, ...rest) {
    let outcome;
    if (isLoopback(hostname)) {
      outcome = loopbackAnswer(name, hostname);
    } else {
      record(`dns-${name}`, hostname, null);
      outcome = [refusal('ENOTFOUND', `query${name}`, hostname), undefined];
    }
    const [err, answer] = outcome;
    if (promised) return err ? Promise.reject(err) : Promise.resolve(answer);
    const cb = rest.reverse().find((a) => typeof a === 'function');
    if (cb) process.nextTick(() => cb(err, answer));
    return undefined;
  };
}

for (const name of RESOLVERS) {
  if (typeof dns[name] === 'function') dns[name] = refusingResolver(name, false);
  if (typeof dns.Resolver.prototype[name] === 'function') dns.Resolver.prototype[name] = refusingResolver(name, false);
  if (typeof dns.promises[name] === 'function') dns.promises[name] = refusingResolver(name, true);
  if (typeof dns.promises.Resolver.prototype[name] === 'function') {
    dns.promises.Resolver.prototype[name] = refusingResolver(name, true);
  }
}

// ES modules that import these builtins by name see the patched functions.
require('node:module').syncBuiltinESMExports();
