// shimgate's panel (DESIGN §9). Plain script, no framework and no build
// step: it reads the JSON endpoints curl uses (/status, /switches) once a
// second and renders them with small functions; every button is one POST
// to a documented endpoint. Accessible names of controls are English on
// every language (scripts and tests rely on them); what they show follows
// the language.
"use strict";

const TEXT = {
  en: {
    shims: "Shims", chain: "Chain", routes: "Routes", failedToday: "Failed today",
    calls: "Recent calls", switches: "Switches by conversation", exchanges: "Recent exchanges",
    mode: "Ordering mode", intercepted: "intercepted", forwarded: "forwarded",
    compacted: "compacted", folded: "folded", fallback: "fallback", sideRequests: "side requests",
    charsSaved: "characters saved", proxyLive: "proxy path live", proxyDown: "proxy path not used",
    proxyNone: "no call yet", direct: "direct mode (no compressor)", lastError: "last error",
    chart: "calls (blue) and folded (green) per 15 s, last 10 minutes",
    effective: "Effective order", configured: "Configured order", moveUp: "up", moveDown: "down",
    disable: "disable", enable: "enable", pin: "pin", unpin: "unpin", adopt: "adopt measured order",
    restore: "restore", restoreAll: "restore all", pinned: "pinned", ranked: "ranked",
    configuredR: "configured", cooling: "cooling", "breaker-open": "breaker open",
    disabled: "disabled", "off-hours": "off hours", expired: "expired",
    backAt: "back at", opensAt: "opens at", endedAt: "ended",
    route: "route", success: "success", successHint: "smoothed as the ranking reads it: (ok + 1) / (tries + 2)", ttft: "TTFT median", speed: "output speed",
    tokensToday: "tokens today (prompt / completion)", inFlight: "in flight / cap",
    breaker: "breaker", score: "score", lastFailure: "last failure", window: "window",
    changesH: "state changes", nextProbe: "next probe", allDay: "all day", until: "until",
    noFailures: "No route failed today.", failures: "failures", at: "at",
    time: "time", shim: "shim", kind: "kind", outcome: "outcome", took: "took", path: "how it went",
    tries: "tries", try: "try", skipped: "skipped", answered: "answered", noCalls: "No calls yet.",
    session: "conversation", from: "from", to: "to", cls: "class", noSwitches: "No switches yet.",
    noSession: "(no conversation id)", before: "before", after: "after", messages: "messages",
    chars: "characters", shrank: "shrank", unchanged: "unchanged", grew: "changed",
    noExchanges: "No exchanges yet.", noFile: "runs on built-in defaults: order and mode cannot be written",
    writesTo: "changes are written to", updated: "updated", stale: "not updating", uptime: "up",
    byHand: "by hand", of: "of",
  },
  zh: {
    shims: "垫片", chain: "故障转移链", routes: "线路", failedToday: "今日失败",
    calls: "最近调用", switches: "按会话的切换记录", exchanges: "最近压缩交换",
    mode: "排序模式", intercepted: "拦截", forwarded: "转发", compacted: "已改写",
    folded: "已压缩", fallback: "回退", sideRequests: "旁路请求", charsSaved: "节省字符",
    proxyLive: "压缩代理生效中", proxyDown: "未经过压缩代理", proxyNone: "尚无调用",
    direct: "直连模式（未配置压缩代理）", lastError: "最近错误",
    chart: "每 15 秒的调用（蓝）与压缩（绿），最近 10 分钟",
    effective: "实际顺序", configured: "配置顺序", moveUp: "上移", moveDown: "下移",
    disable: "停用", enable: "启用", pin: "置顶", unpin: "取消置顶", adopt: "采用实测排序",
    restore: "恢复", restoreAll: "全部恢复", pinned: "已置顶", ranked: "按实测",
    configuredR: "按配置", cooling: "冷却中", "breaker-open": "熔断中", disabled: "已停用",
    "off-hours": "不在时段", expired: "已到期", backAt: "恢复于", opensAt: "开放于", endedAt: "结束于",
    route: "线路", success: "成功率", successHint: "按排序所用的平滑值：(成功 + 1) / (尝试 + 2)", ttft: "首字延迟中位数", speed: "输出速度",
    tokensToday: "今日 token（输入 / 输出）", inFlight: "并发 / 上限", breaker: "熔断器",
    score: "评分", lastFailure: "最近失败", window: "时段", changesH: "状态变化",
    nextProbe: "下次探测", allDay: "全天", until: "截止", noFailures: "今日没有线路失败。",
    failures: "失败次数", at: "时间", time: "时间", shim: "垫片", kind: "类型", outcome: "结果",
    took: "耗时", path: "经过", tries: "次尝试", try: "次尝试", skipped: "跳过", answered: "应答",
    noCalls: "尚无调用。", session: "会话", from: "从", to: "到", cls: "原因",
    noSwitches: "尚无切换。", noSession: "（无会话 ID）", before: "之前", after: "之后",
    messages: "条消息", chars: "字符", shrank: "已缩短", unchanged: "未变", grew: "有改动",
    noExchanges: "尚无交换。", noFile: "使用内置默认配置：无法写入顺序与模式",
    writesTo: "修改写入", updated: "更新于", stale: "未在更新", uptime: "运行", byHand: "手动",
    of: "/",
  },
};

const COUNTERS = ["intercepted", "forwarded", "compacted", "folded", "fallback"];
const params = new URLSearchParams(location.search);
let lang = params.get("lang") || ((navigator.languages || [navigator.language])[0] || "en").slice(0, 2);
if (!TEXT[lang]) lang = "en";
let status = null;
let switches = [];
let lastOk = 0;
const shown = new Map();

const t = (key) => TEXT[lang][key] ?? TEXT.en[key] ?? key;

function esc(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Local time: "12-02 00:00" (with seconds for recent events).
function local(iso, seconds) {
  if (!iso) return "";
  const d = new Date(iso);
  const p = (n) => String(n).padStart(2, "0");
  const hm = `${p(d.getHours())}:${p(d.getMinutes())}` + (seconds ? `:${p(d.getSeconds())}` : "");
  return `${p(d.getMonth() + 1)}-${p(d.getDate())} ${hm}`;
}

function set(id, html) {
  if (shown.get(id) === html) return;
  shown.set(id, html);
  document.getElementById(id).innerHTML = html;
}

// A control's accessible name: "<verb> <route>[ <rest>]", with " (<shim>)"
// appended when another shim has a route of that name.
function label(verb, shim, route, rest) {
  const names = Object.entries(status.chain.routes)
    .filter(([s, list]) => s !== shim && list.some((r) => r.name === route));
  return `${verb} ${route}${rest ? ` ${rest}` : ""}${names.length ? ` (${shim})` : ""}`;
}

function button(name, text, action, attrs) {
  return `<button type="button" aria-label="${esc(name)}" data-action="${esc(JSON.stringify(action))}"${attrs || ""}>${esc(text)}</button>`;
}

// The shims that listen (a disabled one has nothing to show).
function shimNames() {
  return Object.keys(status.chain.routes).filter((s) => (status[`${s}Shim`] || {}).enabled !== false);
}

function renderShims() {
  return shimNames().map((shim) => {
    const s = status[`${shim}Shim`] || {};
    const counters = COUNTERS.map((c) =>
      `<div><dt>${esc(t(c))}</dt><dd data-testid="counter-${esc(shim)}-${c}">${s[c] ?? 0}</dd></div>`).join("");
    const saved = `<div><dt>${esc(t("charsSaved"))}</dt><dd data-testid="saved-${esc(shim)}">${s.charsSaved ?? 0}</dd></div>`;
    const proxy = !s.compressor ? t("direct")
      : s.effective === true ? t("proxyLive") : s.effective === false ? t("proxyDown") : t("proxyNone");
    const error = s.lastError
      ? `<p><span class="muted">${esc(t("lastError"))} ${esc(local(s.lastErrorAt, true))}:</span> ${esc(s.lastError)}</p>` : "";
    return `<div class="card"><h3>${esc(shim)} <span class="muted">${esc(s.boundAddress || s.listen || "")}</span></h3>
      <dl class="counters">${counters}${saved}</dl>${chart(s.history)}
      <p><span class="tag ${s.effective === true ? "ok" : "warn"}">${esc(proxy)}</span>
      ${s.compressor ? `<code>${esc(s.compressor)}</code>` : ""}</p>${error}</div>`;
  }).join("");
}

// Bars per sample: calls (intercepted) and folded, as deltas.
function chart(history) {
  const samples = (history && history.samples) || [];
  if (samples.length < 2) return "";
  const deltas = samples.slice(1).map((s, i) => [s.intercepted - samples[i].intercepted, s.folded - samples[i].folded]);
  const max = Math.max(1, ...deltas.map((d) => d[0]));
  const w = 100 / deltas.length;
  const bars = deltas.map(([calls, folded], i) => {
    const h = (calls / max) * 46, f = (folded / max) * 46;
    return `<rect class="a" x="${i * w}" y="${48 - h}" width="${w * 0.45}" height="${h}"/>` +
      `<rect class="b" x="${i * w + w * 0.5}" y="${48 - f}" width="${w * 0.45}" height="${f}"/>`;
  }).join("");
  return `<svg class="chart" viewBox="0 0 100 48" preserveAspectRatio="none" role="img" aria-label="${esc(t("chart"))}"><title>${esc(t("chart"))}</title>${bars}</svg>`;
}

function reasonText(e) {
  const key = e.reason === "configured" ? "configuredR" : e.reason;
  let text = t(key);
  if (e.until) {
    const when = e.reason === "off-hours" ? "opensAt" : e.reason === "expired" ? "endedAt" : "backAt";
    text += `, ${t(when)} ${local(e.until)}`;
  }
  return text;
}

// The measured ranking as a configured order: routes with fewer than 3
// samples keep their place (as the chain ranks them), the rest by score.
function measuredOrder(list) {
  const probation = (r) => (r.samples || 0) < 3;
  const ranked = list.filter((r) => !probation(r)).sort((a, b) => b.score - a.score);
  return list.map((r) => (probation(r) ? r : ranked.shift())).map((r) => r.name);
}

function renderChain() {
  const writable = !!status.config.path;
  return shimNames().map((shim) => {
    const list = status.chain.routes[shim];
    const effective = status.chain.ordering.effective[shim] || [];
    const pinned = status.chain.ordering.pinned[shim];
    const items = effective.map((e) =>
      `<li data-testid="effective-${esc(shim)}-${esc(e.route)}" class="${["cooling", "breaker-open", "disabled", "off-hours", "expired"].includes(e.reason) ? "skipped" : ""}">
        <b>${esc(e.route)}</b> <span class="muted">${esc(reasonText(e))}</span>${e.score != null ? ` <span class="muted">${t("score")} ${e.score}</span>` : ""}</li>`).join("");
    const names = list.map((r) => r.name);
    const rows = list.map((r, i) => {
      const up = names.slice(), down = names.slice();
      if (i > 0) [up[i - 1], up[i]] = [up[i], up[i - 1]];
      if (i < names.length - 1) [down[i + 1], down[i]] = [down[i], down[i + 1]];
      const off = writable ? "" : " disabled";
      return `<tr><td>${i + 1}</td><td>${esc(r.name)}</td><td class="row">
        ${button(label("Move", shim, r.name, "up"), t("moveUp"), { order: shim, routes: up }, i === 0 ? " disabled" : off)}
        ${button(label("Move", shim, r.name, "down"), t("moveDown"), { order: shim, routes: down }, i === names.length - 1 ? " disabled" : off)}
        ${r.disabled ? button(label("Enable", shim, r.name), t("enable"), { post: routePath(shim, r.name, "enable") })
          : button(label("Disable", shim, r.name), t("disable"), { post: routePath(shim, r.name, "disable") })}
        ${pinned === r.name ? "" : button(label("Pin", shim, r.name), t("pin"), { pin: shim, route: r.name })}
      </td></tr>`;
    }).join("");
    const unpin = pinned ? button(`Unpin ${shim}`, `${t("unpin")} ${pinned}`, { pin: shim, route: null }) : "";
    const adopt = button(`Adopt measured order ${shim}`, t("adopt"), { order: shim, routes: measuredOrder(list) }, writable ? "" : " disabled");
    return `<div class="card"><h3>${esc(shim)}</h3><div class="muted">${esc(t("effective"))}</div>
      <ol class="effective" data-testid="effective-${esc(shim)}">${items}</ol>
      <div class="muted">${esc(t("configured"))}</div><table><tbody>${rows}</tbody></table>
      <p class="row">${unpin}${adopt}</p></div>`;
  }).join("");
}

function routePath(shim, route, verb) {
  return `/routes/${encodeURIComponent(shim)}/${encodeURIComponent(route)}/${verb}`;
}

function pct(x) {
  return x == null ? "" : `${Math.round(x * 100)}%`;
}

function renderRoutes() {
  return shimNames().map((shim) => {
    const rows = status.chain.routes[shim].map((r) => {
      const b = r.breaker || {};
      const breaker = `<span class="tag ${b.state === "closed" ? "ok" : "bad"}">${esc(b.state)}</span>` +
        (b.until ? ` <span class="muted">${esc(t("nextProbe"))} ${esc(local(b.until, true))}</span>` : "");
      const sp = r.outputSpeed || {};
      const speed = sp.perSecond != null ? `${sp.perSecond} ${esc(sp.unit)}` : "";
      const today = r.today || {};
      const cap = r.maxConcurrency ? r.maxConcurrency : "∞";
      const failure = r.lastFailure ? `${esc(r.lastFailure.code)} <span class="muted">${esc(local(r.lastFailure.at, true))}</span><br><small>${esc(r.lastFailure.reason)}</small>` : "";
      const hours = (r.activeHours || []).join(", ") || t("allDay");
      const window = r.until ? `${esc(hours)}; ${esc(t("until"))} ${esc(r.until)}` : esc(hours);
      const via = r.proxy && r.proxy !== "none" ? `<br><small data-testid="proxy">⇄ ${esc(r.proxy)} <span class="muted">(${esc(r.proxySource)})</span></small>` : "";
      const changes = (r.changes || []).map((c) =>
        `<li>${esc(local(c.at, true))} <b>${esc(c.change)}</b>${c.byHand ? ` (${esc(t("byHand"))})` : ""}` +
        `${c.until ? ` → ${esc(local(c.until, true))}` : ""}${c.cause ? `: ${esc(c.cause)}` : ""}${c.source ? ` <span class="muted">[${esc(c.source)}]</span>` : ""}</li>`).join("");
      return `<tr data-testid="route-${esc(shim)}-${esc(r.name)}"><td><b>${esc(r.name)}</b>${r.disabled ? ` <span class="tag warn">${esc(t("disabled"))}</span>` : ""}${r.cooldownUntil ? ` <span class="tag bad">${esc(t("cooling"))} ${esc(t("backAt"))} ${esc(local(r.cooldownUntil))}</span>` : ""}</td>
        <td>${pct(r.successRate)} <span class="muted">(${r.ok}/${r.attempts})</span></td>
        <td>${r.ttftMedianMs != null ? `${r.ttftMedianMs} ms` : ""}</td><td>${speed}</td>
        <td>${today.promptTokens ?? 0} / ${today.completionTokens ?? 0}</td>
        <td>${r.inFlight} / ${cap}</td><td>${breaker}</td><td>${r.score}</td><td>${failure}</td><td>${window}${via}</td>
        <td>${changes ? `<details><summary>${(r.changes || []).length}</summary><ul class="changes">${changes}</ul></details>` : ""}</td></tr>`;
    }).join("");
    return `<h3>${esc(shim)}</h3><div class="scroll"><table><thead><tr>
      <th>${t("route")}</th><th title="${esc(t("successHint"))}">${t("success")}</th><th>${t("ttft")}</th><th>${t("speed")}</th><th>${t("tokensToday")}</th>
      <th>${t("inFlight")}</th><th>${t("breaker")}</th><th>${t("score")}</th><th>${t("lastFailure")}</th><th>${t("window")}</th><th>${t("changesH")}</th>
      </tr></thead><tbody>${rows}</tbody></table></div>`;
  }).join("");
}

function renderFailed() {
  const failed = status.chain.failedToday || [];
  if (!failed.length) return `<p class="muted">${esc(t("noFailures"))}</p>`;
  const rows = failed.map((f) => `<tr><td>${esc(f.shim)}</td><td><b>${esc(f.route)}</b></td><td>${f.failures}</td>
    <td>${f.lastFailure ? `${esc(f.lastFailure.code)} ${esc(local(f.lastFailure.at, true))}: ${esc(f.lastFailure.reason)}` : ""}</td>
    <td>${button(label("Restore", f.shim, f.route), t("restore"), { post: routePath(f.shim, f.route, "restore") })}</td></tr>`).join("");
  return `<table><thead><tr><th>${t("shim")}</th><th>${t("route")}</th><th>${t("failures")}</th><th>${t("lastFailure")}</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table><p>${button("Restore all", t("restoreAll"), { post: "/routes/reset" })}</p>`;
}

function tries(n) {
  return `${n} ${t(n === 1 ? "try" : "tries")}`;
}

function renderCalls() {
  const calls = status.chain.calls || [];
  if (!calls.length) return `<p class="muted">${esc(t("noCalls"))}</p>`;
  const rows = calls.slice(0, 20).map((c) => {
    const path = c.routes.map((r) => r.attempt === 0
      ? `<span class="muted">${esc(r.route)}: ${esc(t("skipped"))} (${esc(r.reason)})</span>`
      : r.ok ? `<b>${esc(r.route)}</b> ${esc(t("answered"))} (${tries(r.tries)}, ${r.elapsedMs} ms)`
        : `${esc(r.route)} <span class="tag bad">${esc(r.code || "")}</span> (${tries(r.tries)}, ${r.elapsedMs} ms)${r.reason ? ` <small>${esc(r.reason)}</small>` : ""}`).join(" → ");
    return `<tr><td>${esc(local(c.at, true))}</td><td>${esc(c.shim)}</td><td>${esc(c.kind)}</td>
      <td><span class="tag ${c.outcome === "ok" ? "ok" : "bad"}">${esc(c.outcome)}</span>${c.code ? ` ${esc(c.code)}` : ""}</td><td>${c.elapsedMs} ms</td><td>${path}</td></tr>`;
  }).join("");
  return `<div class="scroll"><table><thead><tr><th>${t("time")}</th><th>${t("shim")}</th><th>${t("kind")}</th><th>${t("outcome")}</th><th>${t("took")}</th><th>${t("path")}</th></tr></thead><tbody>${rows}</tbody></table></div>`;
}

function renderSwitches() {
  if (!switches.length) return `<p class="muted">${esc(t("noSwitches"))}</p>`;
  const bySession = new Map();
  for (const s of switches) {
    const key = s.session || "";
    if (!bySession.has(key)) bySession.set(key, []);
    bySession.get(key).push(s);
  }
  return [...bySession].map(([session, list]) => {
    const rows = list.map((s) => `<tr><td>${esc(local(s.at, true))}</td><td>${esc(s.shim)}</td><td>${esc(s.from)} → <b>${esc(s.to)}</b></td><td>${esc(s.class || "")}</td></tr>`).join("");
    return `<h3 data-session="${esc(session)}">${esc(t("session"))}: ${session ? `<code>${esc(session)}</code>` : esc(t("noSession"))}</h3>
      <table><thead><tr><th>${t("time")}</th><th>${t("shim")}</th><th>${t("from")} → ${t("to")}</th><th>${t("cls")}</th></tr></thead><tbody>${rows}</tbody></table>`;
  }).join("");
}

function renderExchanges() {
  return shimNames().map((shim) => {
    const s = status[`${shim}Shim`] || {};
    const list = s.recentExchanges || [];
    const rows = list.map((x) => `<tr><td>${esc(local(new Date(x.at).toISOString(), true))}</td>
      <td>${x.beforeCount} → ${x.afterCount} ${esc(t("messages"))}</td><td>${x.beforeContent} → ${x.afterContent} ${esc(t("chars"))}</td>
      <td><span class="tag ${x.shrank ? "ok" : ""}">${esc(x.shrank ? t("shrank") : x.changed ? t("grew") : t("unchanged"))}</span></td></tr>`).join("");
    return `<div class="card" data-testid="exchanges-${esc(shim)}"><h3>${esc(shim)}</h3>${list.length
      ? `<table><tbody>${rows}</tbody></table>` : `<p class="muted">${esc(t("noExchanges"))}</p>`}</div>`;
  }).join("");
}

function render() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  for (const el of document.querySelectorAll("[data-t]")) el.textContent = t(el.dataset.t);
  if (!status) return;
  const secs = Math.round(status.uptimeMs / 1000);
  document.getElementById("meta").textContent = `v${status.version} · ${t("uptime")} ${Math.floor(secs / 3600)}h ${Math.floor(secs / 60) % 60}m ${secs % 60}s`;
  const live = document.getElementById("live");
  const stale = Date.now() - lastOk > 3000;
  live.textContent = stale ? t("stale") : `${t("updated")} ${local(new Date(lastOk).toISOString(), true)}`;
  live.classList.toggle("stale", stale);
  const mode = document.getElementById("mode");
  if (document.activeElement !== mode) mode.value = status.chain.ordering.mode;
  mode.disabled = !status.config.path;
  document.getElementById("mode-note").textContent = status.config.path
    ? `${t("writesTo")} ${status.config.path}` : t("noFile");
  set("shims", renderShims());
  set("chain", renderChain());
  set("routes", renderRoutes());
  set("failed", renderFailed());
  set("calls", renderCalls());
  set("switches", renderSwitches());
  set("exchanges", renderExchanges());
}

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

let polling = false;
async function refresh() {
  if (polling) return;
  polling = true;
  try {
    const [s, w] = await Promise.all([getJson("/status"), getJson("/switches")]);
    status = s;
    switches = w.switches || [];
    lastOk = Date.now();
  } catch (e) {
    // Shown as "not updating"; the last data stays on screen.
  } finally {
    polling = false;
    render();
  }
}

function showError(text) {
  const el = document.getElementById("error");
  el.textContent = text || "";
  el.hidden = !text;
}

async function post(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? "" : JSON.stringify(body),
  });
  if (!r.ok) {
    let why = `${r.status}`;
    try { why = (await r.json()).error.message || why; } catch (e) { /* not JSON */ }
    throw new Error(`${path}: ${why}`);
  }
  return r.json();
}

async function act(action) {
  try {
    if (action.post) await post(action.post);
    else if (action.pin) await post(`/routes/${encodeURIComponent(action.pin)}/pin`, { route: action.route });
    else if (action.order) await post(`/routes/${encodeURIComponent(action.order)}/order`, { routes: action.routes });
    else if (action.mode) await post("/ordering", { mode: action.mode });
    showError("");
  } catch (e) {
    showError(e.message);
  }
  shown.clear();
  await refresh();
}

function setLang(next) {
  lang = next;
  const url = new URL(location.href);
  url.searchParams.set("lang", next);
  history.replaceState(null, "", url);
  shown.clear();
  render();
}

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (b && !b.disabled) act(JSON.parse(b.dataset.action));
});
document.getElementById("mode").addEventListener("change", (ev) => act({ mode: ev.target.value }));
document.getElementById("lang-en").addEventListener("click", () => setLang("en"));
document.getElementById("lang-zh").addEventListener("click", () => setLang("zh"));
if (params.has("token")) {
  // The cookie holds it now; keep it out of the address bar and history.
  const url = new URL(location.href);
  url.searchParams.delete("token");
  history.replaceState(null, "", url);
}
refresh();
setInterval(refresh, 1000);
