// shimgate's panel (docs/panel.md). Plain script, no framework and no build
// step: it reads the JSON endpoints curl uses (/status, /switches) once a
// second and renders them with small functions; every button is one POST
// to a documented endpoint, and the page redraws from that POST's answer
// at once (then reads /status again), not at the next poll. Accessible
// names of controls are English on every language (scripts and tests rely
// on them); what they show follows the language. Every time is written in
// the browser's own zone, in one format (`fmtTime`).
"use strict";

const TEXT = {
  en: {
    shims: "Shims", chain: "Chain", routes: "Routes", failedToday: "Failed today",
    calls: "Recent calls", switches: "Switches by conversation", exchanges: "Recent exchanges",
    mode: "Ordering mode", "mode-auto": "auto", "mode-manual": "manual", "mode-measured": "measured",
    intercepted: "intercepted", forwarded: "forwarded",
    compacted: "compacted", folded: "folded", fallback: "fallback", sideRequests: "side requests",
    charsSaved: "characters saved", proxyLive: "proxy path live", proxyDown: "proxy path not used",
    proxyNone: "no call yet", direct: "direct mode (no compressor)", lastError: "last error",
    chartCalls: "calls", chartFolded: "folded", chartUnit: "per 15 s", chartSpan: "last {n} min, your local time",
    chartEmpty: "No samples yet (one every 15 s).",
    effective: "Effective order", configured: "Configured order", moveUp: "up", moveDown: "down",
    disable: "disable", enable: "enable", pin: "pin", unpin: "unpin", adopt: "adopt measured order",
    restore: "restore", restoreAll: "restore all", pinned: "pinned", ranked: "ranked",
    configuredR: "configured", cooling: "cooling", "breaker-open": "breaker open",
    disabled: "disabled", "off-hours": "off hours", expired: "expired",
    backAt: "back at", opensAt: "opens at", endedAt: "ended",
    noRoutes: "no routes configured",
    filter: "filter routes", filterHint: "a part of a route's name", showAll: "show all {n}",
    showFirst: "show the first {n}", shownOf: "{shown} of {n} routes",
    route: "route", success: "success", successHint: "measured: calls that succeeded / tries, since start",
    ttft: "TTFT median", speed: "output speed",
    tokensToday: "tokens today (prompt / completion)", inFlight: "in flight / cap",
    breaker: "breaker", score: "score",
    scoreHint: "what the measured ranking sorts by: the smoothed success rate (ok + 1) / (tries + 2) over the recent window, times the speed factor",
    lastFailure: "last failure", window: "window",
    changesH: "state changes", nextProbe: "next probe", allDay: "all day", until: "until",
    closed: "closed", open: "open", "half-open": "half-open",
    "change-cooled": "cooled", "change-breaker-opened": "breaker opened", "change-breaker-half-open": "breaker half-open",
    "change-breaker-closed": "breaker closed", "change-disabled": "disabled", "change-enabled": "enabled",
    "change-pinned": "pinned", "change-unpinned": "unpinned", "change-restored": "restored", "change-reset": "reset",
    noFailures: "No route failed today.", failures: "failures", at: "at",
    time: "time", shim: "shim", kind: "kind", outcome: "outcome", took: "took", path: "how it went",
    "kind-return": "through the proxy", "kind-fallback": "direct", "kind-passthrough": "passed through",
    kindHint: "internal name", ok: "ok", failed: "failed", aborted: "aborted",
    tries: "tries", try: "try", skipped: "skipped", answered: "answered", noCalls: "No calls yet.",
    session: "conversation", from: "from", to: "to", cls: "class", noSwitches: "No switches yet.",
    noSession: "(no conversation id)", before: "before", after: "after", messages: "messages",
    chars: "characters", shrank: "shrank", unchanged: "unchanged", grew: "changed",
    noExchanges: "No exchanges yet.", noFile: "runs on built-in defaults: order and mode cannot be written",
    zoneNote: "Times here are your browser's ({browser}); the quota hour, route windows and \"today\" follow {zone} ([ordering] zone).",
    writesTo: "changes are written to", reload: "reload config", reloaded: "reloaded at", updated: "updated", stale: "not updating", uptime: "up",
    byHand: "by hand", of: "of", ms: "ms", "tokens/s": "tokens/s", "chars/s": "chars/s", unlimited: "no cap",
    hours: "h", minutes: "m", seconds: "s", version: "version",
    savings: "Savings", savingsToday: "Today", savingsDay: "{date} in {zone}",
    savingsCalls: "calls", agentTokens: "agent's tokens", sentTokens: "sent upstream", savedTokens: "saved",
    cachedTokens: "of them cached", sideCalls: "compressor's calls", sideTokens: "their tokens", netTokens: "net",
    savingsChart: "net tokens per day", savingsSpan: "last 14 days", savingsUp: "saved", savingsDown: "cost more",
    savingsBest: "Saved most", savingsWorst: "Cost more than it saved", savingsNoBest: "No conversation saved tokens yet.",
    savingsNoWorst: "No conversation cost more than it saved.", zoneLocal: "this machine's zone",
    savingsEmpty: "No call booked yet.", savingsOlder: "and {n} older conversations, summed",
    savingsEstimated: "{n} calls reported no usage: estimated.",
    "method-provider-ratio": "Tokens: sent = the provider's own count; the agent's = the provider's tokens per character sent × the characters the agent sent; net = saved − the compressor's own calls.",
    capture: "Capture proxy", captureOff: "Off: set [capture] listen to serve clients that only follow a proxy (TRAE IDE, the Qoder CLI and IDE on legacy, JetBrains).",
    captureUp: "listening", captureDown: "not listening", capIntercepted: "decrypted", capTunnelled: "tunnelled",
    capLoopback: "loopback", capHanded: "calls to the shims", capForwarded: "forwarded unchanged", capAbsolute: "plain proxy requests",
    capRefusals: "certificate refused", capHost: "host", capMode: "mode", "cap-intercept": "decrypt", "cap-tunnel": "tunnel",
    capListed: "listed", capImplicit: "implicit routes", capIgnored: "The {source} proxy setting names this listener: shimgate's own connections ignore it.",
    capWhy: "why", capLastRefusal: "last refusal", capNotProxy: "refused (not proxy requests)", capNone: "no connection yet",
  },
  zh: {
    shims: "垫片", chain: "故障转移链", routes: "线路", failedToday: "今日失败",
    calls: "最近调用", switches: "按会话的切换记录", exchanges: "最近压缩交换",
    mode: "排序模式", "mode-auto": "自动", "mode-manual": "手动", "mode-measured": "按实测",
    intercepted: "拦截", forwarded: "转发", compacted: "已改写",
    folded: "已压缩", fallback: "回退", sideRequests: "旁路请求", charsSaved: "节省字符",
    proxyLive: "压缩代理生效中", proxyDown: "未经过压缩代理", proxyNone: "尚无调用",
    direct: "直连模式（未配置压缩代理）", lastError: "最近错误",
    chartCalls: "调用", chartFolded: "已压缩", chartUnit: "每 15 秒", chartSpan: "最近 {n} 分钟，本地时间",
    chartEmpty: "尚无采样（每 15 秒一次）。",
    effective: "实际顺序", configured: "配置顺序", moveUp: "上移", moveDown: "下移",
    disable: "停用", enable: "启用", pin: "置顶", unpin: "取消置顶", adopt: "采用实测排序",
    restore: "恢复", restoreAll: "全部恢复", pinned: "已置顶", ranked: "按实测",
    configuredR: "按配置", cooling: "冷却中", "breaker-open": "熔断中", disabled: "已停用",
    "off-hours": "不在时段", expired: "已到期", backAt: "恢复于", opensAt: "开放于", endedAt: "结束于",
    noRoutes: "未配置线路",
    filter: "筛选线路", filterHint: "线路名称的一部分", showAll: "显示全部 {n} 条",
    showFirst: "只显示前 {n} 条", shownOf: "显示 {shown} / {n} 条线路",
    route: "线路", success: "成功率", successHint: "实测：启动以来成功的调用 / 尝试次数",
    ttft: "首字延迟中位数", speed: "输出速度",
    tokensToday: "今日 token（输入 / 输出）", inFlight: "并发 / 上限", breaker: "熔断器",
    score: "评分", scoreHint: "实测排序的依据：近期窗口内的平滑成功率 (成功 + 1) / (尝试 + 2) 乘以速度系数",
    lastFailure: "最近失败", window: "时段", changesH: "状态变化",
    nextProbe: "下次探测", allDay: "全天", until: "截止",
    closed: "闭合", open: "断开", "half-open": "半开",
    "change-cooled": "进入冷却", "change-breaker-opened": "熔断器断开", "change-breaker-half-open": "熔断器半开",
    "change-breaker-closed": "熔断器闭合", "change-disabled": "已停用", "change-enabled": "已启用",
    "change-pinned": "已置顶", "change-unpinned": "取消置顶", "change-restored": "已恢复", "change-reset": "已重置",
    noFailures: "今日没有线路失败。",
    failures: "失败次数", at: "时间", time: "时间", shim: "垫片", kind: "类型", outcome: "结果",
    took: "耗时", path: "经过",
    "kind-return": "经压缩代理", "kind-fallback": "直连", "kind-passthrough": "原样转发",
    kindHint: "内部名称", ok: "成功", failed: "失败", aborted: "已中止",
    tries: "次尝试", try: "次尝试", skipped: "跳过", answered: "应答",
    noCalls: "尚无调用。", session: "会话", from: "从", to: "到", cls: "原因",
    noSwitches: "尚无切换。", noSession: "（无会话 ID）", before: "之前", after: "之后",
    messages: "条消息", chars: "字符", shrank: "已缩短", unchanged: "未变", grew: "有改动",
    noExchanges: "尚无交换。", noFile: "使用内置默认配置：无法写入顺序与模式",
    zoneNote: "此处时间为浏览器时区（{browser}）；配额重置时刻、线路时段与“今日”按 {zone} 计算（[ordering] zone）。",
    writesTo: "修改写入", reload: "重新加载配置", reloaded: "已重新加载于", updated: "更新于", stale: "未在更新", uptime: "运行", byHand: "手动",
    of: "/", ms: "毫秒", "tokens/s": "token/秒", "chars/s": "字符/秒", unlimited: "不限",
    hours: "时", minutes: "分", seconds: "秒", version: "版本",
    savings: "节省", savingsToday: "今日", savingsDay: "{date}（{zone}）",
    savingsCalls: "调用", agentTokens: "代理原始 token", sentTokens: "实际发送", savedTokens: "压缩节省",
    cachedTokens: "其中缓存命中", sideCalls: "压缩器自身调用", sideTokens: "其 token", netTokens: "净节省",
    savingsChart: "每日净节省 token", savingsSpan: "近 14 天", savingsUp: "节省", savingsDown: "多花",
    savingsBest: "节省最多的会话", savingsWorst: "得不偿失的会话", savingsNoBest: "尚无节省 token 的会话。",
    savingsNoWorst: "没有得不偿失的会话。", zoneLocal: "本机时区",
    savingsEmpty: "尚无记账的调用。", savingsOlder: "另有 {n} 个较早的会话已合并",
    savingsEstimated: "{n} 次调用没有用量报告，为估算值。",
    "method-provider-ratio": "token 计法：实际发送 = 服务商自报数；代理原始 = 服务商每字符 token 数 × 代理发送的字符数；净节省 = 压缩节省 − 压缩器自身调用。",
    capture: "捕获代理", captureOff: "未开启：设置 [capture] listen，即可服务只走代理的客户端（TRAE IDE、legacy 传输下的 Qoder CLI 与 IDE、JetBrains 插件）。",
    captureUp: "监听中", captureDown: "未监听", capIntercepted: "已解密", capTunnelled: "隧道直通",
    capLoopback: "本机", capHanded: "交给垫片的调用", capForwarded: "原样转发", capAbsolute: "普通代理请求",
    capRefusals: "证书被拒", capHost: "主机", capMode: "方式", "cap-intercept": "解密", "cap-tunnel": "隧道",
    capListed: "在列表中", capImplicit: "隐含线路", capIgnored: "{source} 代理设置指向本监听端口：shimgate 自身的连接不经过它。",
    capWhy: "原因", capLastRefusal: "最近一次拒绝", capNotProxy: "已拒绝（非代理请求）", capNone: "尚无连接",
  },
};

const COUNTERS = ["intercepted", "forwarded", "compacted", "folded", "fallback"];
// Past this many routes a list shows its first ones and a "show all".
const COLLAPSE_AT = 20;
const params = new URLSearchParams(location.search);
let lang = params.get("lang") || ((navigator.languages || [navigator.language])[0] || "en").slice(0, 2);
if (!TEXT[lang]) lang = "en";
let status = null;
let switches = [];
let lastOk = 0;
let filter = "";
const expanded = new Set();
const shown = new Map();

const t = (key, vars) => {
  let text = TEXT[lang][key] ?? TEXT.en[key] ?? key;
  for (const [k, v] of Object.entries(vars || {})) text = text.replace(`{${k}}`, v);
  return text;
};

function esc(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

const pad = (n) => String(n).padStart(2, "0");

// Every instant on the page, in the browser's zone: "12-02 06:31:05".
function fmtTime(at) {
  if (at == null || at === "") return "";
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  return `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Text from the server (an error, a reason) with its UTC instants written
// as `fmtTime` writes every other time.
const INSTANT = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z/g;
const localText = (text) => String(text ?? "").replace(INSTANT, (iso) => fmtTime(iso));

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

// The items of a list a person can read: past COLLAPSE_AT, only those the
// filter matches, and only the first COLLAPSE_AT unless expanded. `more`
// is the line under the list (count and show all / first), or "".
function visible(shim, list, name) {
  if (list.length <= COLLAPSE_AT) return { items: list, more: "" };
  const needle = filter.trim().toLowerCase();
  const matching = needle ? list.filter((x) => name(x).toLowerCase().includes(needle)) : list;
  const open = expanded.has(shim);
  const items = open ? matching : matching.slice(0, COLLAPSE_AT);
  const toggle = matching.length > COLLAPSE_AT
    ? ` <button type="button" data-expand="${esc(shim)}">${esc(t(open ? "showFirst" : "showAll", { n: open ? COLLAPSE_AT : matching.length }))}</button>` : "";
  const more = `<p class="more muted" data-testid="more-${esc(shim)}">${esc(t("shownOf", { shown: items.length, n: list.length }))}${toggle}</p>`;
  return { items, more };
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
      ? `<p><span class="muted">${esc(t("lastError"))} ${esc(fmtTime(s.lastErrorAt))}:</span> ${esc(localText(s.lastError))}</p>` : "";
    return `<div class="card"><h3>${esc(shim)} <span class="muted">${esc(s.boundAddress || s.listen || "")}</span></h3>
      <dl class="counters">${counters}${saved}</dl>${chart(shim, s.history)}
      <p><span class="tag ${s.effective === true ? "ok" : "warn"}">${esc(proxy)}</span>
      ${s.compressor ? `<code>${esc(s.compressor)}</code>` : ""}</p>${error}</div>`;
  }).join("");
}

// Calls (intercepted) and folded per sample interval, as bars on a time
// axis in local time, with the y scale's top value and a legend.
function chart(shim, history) {
  const samples = (history && history.samples) || [];
  if (samples.length < 2) return `<p class="muted chart-empty">${esc(t("chartEmpty"))}</p>`;
  const deltas = samples.slice(1).map((s, i) => [s.intercepted - samples[i].intercepted, s.folded - samples[i].folded]);
  const max = Math.max(1, ...deltas.flat());
  const [left, top, width, height] = [26, 4, 290, 64];
  const w = width / deltas.length;
  const y = (v) => top + height - (v / max) * height;
  const bars = deltas.map(([calls, folded], i) => {
    const x = left + i * w;
    return `<rect class="a" x="${x.toFixed(1)}" y="${y(calls).toFixed(1)}" width="${(w * 0.45).toFixed(1)}" height="${(top + height - y(calls)).toFixed(1)}"><title>${esc(fmtTime(samples[i + 1].at))}: ${calls} ${esc(t("chartCalls"))}, ${folded} ${esc(t("chartFolded"))}</title></rect>` +
      `<rect class="b" x="${(x + w * 0.5).toFixed(1)}" y="${y(folded).toFixed(1)}" width="${(w * 0.45).toFixed(1)}" height="${(top + height - y(folded)).toFixed(1)}"/>`;
  }).join("");
  // Three ticks: the first sample, the middle one, now (HH:MM).
  const ticks = [0, Math.floor((samples.length - 1) / 2), samples.length - 1].filter((v, i, a) => a.indexOf(v) === i).map((i) => {
    const x = i === 0 ? left : left + i * w;
    const anchor = i === 0 ? "start" : i === samples.length - 1 ? "end" : "middle";
    return `<text class="tick" x="${Math.min(x, left + width).toFixed(1)}" y="${top + height + 12}" text-anchor="${anchor}">${esc(fmtTime(samples[i].at).slice(6, 11))}</text>`;
  }).join("");
  const axis = `<line class="axis" x1="${left}" y1="${top + height}" x2="${left + width}" y2="${top + height}"/>` +
    `<text class="tick" x="${left - 3}" y="${top + 8}" text-anchor="end">${max}</text>` +
    `<text class="tick" x="${left - 3}" y="${top + height}" text-anchor="end">0</text>`;
  const minutes = Math.max(1, Math.round((new Date(samples[samples.length - 1].at) - new Date(samples[0].at)) / 60000));
  const span = t("chartSpan", { n: minutes });
  const title = `${t("chartCalls")} / ${t("chartFolded")} ${t("chartUnit")}, ${span}`;
  return `<figure class="chart" data-testid="chart-${esc(shim)}">
    <figcaption><span class="key a"></span>${esc(t("chartCalls"))} <span class="key b"></span>${esc(t("chartFolded"))}
      <span class="muted">${esc(t("chartUnit"))} · ${esc(span)}</span></figcaption>
    <svg viewBox="0 0 ${left + width + 2} ${top + height + 16}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>${axis}${bars}${ticks}</svg></figure>`;
}

// A token count as the page's language writes numbers; `signed` puts a
// plus before a gain (a loss has its minus).
function tokens(n, signed) {
  const text = Number(n || 0).toLocaleString(lang === "zh" ? "zh-CN" : "en-US");
  return signed && n > 0 ? `+${text}` : text;
}

const SAVINGS_FIELDS = ["agentTokens", "sentTokens", "savedTokens", "cachedTokens", "sideCalls", "sideTokens", "netTokens"];

// The savings card (`/status` `savings`): today's figures, net per day over
// the last 14 days in the config's zone, and the conversations that saved
// most and those where compression cost more than it saved.
function renderSavings() {
  const sv = status.savings;
  if (!sv) return "";
  const today = sv.today || {};
  const figures = SAVINGS_FIELDS.map((f) => {
    const signed = f === "savedTokens" || f === "netTokens";
    const cls = signed ? (today[f] > 0 ? "net-up" : today[f] < 0 ? "net-down" : "") : "";
    return `<div><dt>${esc(t(f))}</dt><dd class="${cls}" data-testid="savings-today-${f}">${esc(tokens(today[f], signed))}</dd></div>`;
  }).join("");
  const estimated = today.estimatedCalls ? ` ${esc(t("savingsEstimated", { n: today.estimatedCalls }))}` : "";
  const zone = sv.zone === "local" ? t("zoneLocal") : sv.zone;
  const day = t("savingsDay", { date: today.date || "", zone });
  const todayCard = `<div class="card" data-testid="savings-today"><h3>${esc(t("savingsToday"))} <span class="muted">${esc(day)} · ${esc(tokens(today.calls))} ${esc(t("savingsCalls"))}</span></h3>
    <dl class="counters">${figures}</dl>${savingsChart(sv)}
    <p class="method muted" data-testid="savings-method" title="${esc(sv.method)}">${esc(t(`method-${sv.method}`))}${estimated}</p></div>`;
  const convs = sv.conversations || [];
  const best = convs.filter((c) => c.netTokens > 0).sort((a, b) => b.netTokens - a.netTokens).slice(0, 5);
  const worst = convs.filter((c) => c.netTokens < 0).sort((a, b) => a.netTokens - b.netTokens).slice(0, 5);
  const older = sv.olderConversations && sv.olderConversations.conversations
    ? `<p class="muted more">${esc(t("savingsOlder", { n: sv.olderConversations.conversations }))}</p>` : "";
  return `${todayCard}<div class="card"><h3>${esc(t("savingsBest"))}</h3>${conversationTable(best, "savings-best", t("savingsNoBest"))}
    <h3>${esc(t("savingsWorst"))}</h3>${conversationTable(worst, "savings-worst", t("savingsNoWorst"))}${older}</div>`;
}

function conversationTable(list, testid, empty) {
  if (!list.length) return `<p class="muted" data-testid="${testid}">${esc(empty)}</p>`;
  const rows = list.map((c) => `<tr data-conversation="${esc(c.id)}"><td>${c.id ? `<code>${esc(c.id)}</code>` : esc(t("noSession"))}</td><td>${esc(c.shim)}</td>
    <td>${esc(tokens(c.calls))}</td><td>${esc(tokens(c.agentTokens))} → ${esc(tokens(c.sentTokens))}</td>
    <td>${esc(tokens(c.sideCalls))} / ${esc(tokens(c.sideTokens))}</td>
    <td class="${c.netTokens > 0 ? "net-up" : "net-down"}">${esc(tokens(c.netTokens, true))}</td></tr>`).join("");
  return `<div class="scroll"><table data-testid="${testid}"><thead><tr><th>${esc(t("session"))}</th><th>${esc(t("shim"))}</th><th>${esc(t("savingsCalls"))}</th>
    <th>${esc(t("agentTokens"))} → ${esc(t("sentTokens"))}</th><th>${esc(t("sideCalls"))} / ${esc(t("sideTokens"))}</th><th>${esc(t("netTokens"))}</th></tr></thead><tbody>${rows}</tbody></table></div>`;
}

// The last 14 days (in the config's zone, today last): one bar each, up
// for a net saving, down for a net cost, on one scale; days with no call
// have no bar.
function savingsChart(sv) {
  const byDate = new Map((sv.days || []).map((d) => [d.date, d]));
  const end = new Date(`${sv.today.date}T00:00:00Z`);
  if (Number.isNaN(end.getTime())) return "";
  const days = [];
  for (let i = 13; i >= 0; i--) {
    const date = new Date(end.getTime() - i * 86400000).toISOString().slice(0, 10);
    days.push({ date, day: byDate.get(date) });
  }
  const nets = days.map((d) => (d.day ? d.day.netTokens : 0));
  const max = Math.max(1, ...nets.map(Math.abs));
  const [left, top, width, height] = [44, 4, 280, 64];
  const w = width / days.length;
  const zero = top + height / 2;
  const bars = days.map((d, i) => {
    if (!d.day) return "";
    const net = d.day.netTokens;
    const h = (Math.abs(net) / max) * (height / 2);
    const tip = `${d.date}: ${t("netTokens")} ${tokens(net, true)} (${t("savedTokens")} ${tokens(d.day.savedTokens, true)}, ${t("sideTokens")} ${tokens(d.day.sideTokens)}, ${tokens(d.day.calls)} ${t("savingsCalls")})`;
    return `<rect class="${net >= 0 ? "up" : "down"}" data-date="${esc(d.date)}" x="${(left + i * w + w * 0.15).toFixed(1)}" y="${(net >= 0 ? zero - h : zero).toFixed(1)}" width="${(w * 0.7).toFixed(1)}" height="${Math.max(h, 0.5).toFixed(1)}"><title>${esc(tip)}</title></rect>`;
  }).join("");
  const ticks = [0, 7, 13].map((i) => {
    const anchor = i === 0 ? "start" : i === 13 ? "end" : "middle";
    const x = i === 13 ? left + width : left + i * w + w / 2;
    return `<text class="tick" x="${x.toFixed(1)}" y="${top + height + 12}" text-anchor="${anchor}">${esc(days[i].date.slice(5))}</text>`;
  }).join("");
  const axis = `<line class="axis" x1="${left}" y1="${zero}" x2="${left + width}" y2="${zero}"/>` +
    `<text class="tick" x="${left - 3}" y="${top + 8}" text-anchor="end">+${esc(tokens(max))}</text>` +
    `<text class="tick" x="${left - 3}" y="${zero + 3}" text-anchor="end">0</text>` +
    `<text class="tick" x="${left - 3}" y="${top + height}" text-anchor="end">−${esc(tokens(max))}</text>`;
  const title = `${t("savingsChart")}, ${t("savingsSpan")} (${sv.zone === "local" ? t("zoneLocal") : sv.zone})`;
  return `<figure class="chart" data-testid="savings-chart">
    <figcaption><span class="key up"></span>${esc(t("savingsUp"))} <span class="key down"></span>${esc(t("savingsDown"))}
      <span class="muted">${esc(t("savingsChart"))} · ${esc(t("savingsSpan"))}</span></figcaption>
    <svg viewBox="0 0 ${left + width + 2} ${top + height + 16}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>${axis}${bars}${ticks}</svg></figure>`;
}

function reasonText(e) {
  const key = e.reason === "configured" ? "configuredR" : e.reason;
  let text = t(key);
  if (e.until) {
    const when = e.reason === "off-hours" ? "opensAt" : e.reason === "expired" ? "endedAt" : "backAt";
    text += `, ${t(when)} ${fmtTime(e.until)}`;
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

const SKIPPED = ["cooling", "breaker-open", "disabled", "off-hours", "expired"];

function configuredRows(shim, list, pinned, writable) {
  const names = list.map((r) => r.name);
  const { items, more } = visible(shim, list, (r) => r.name);
  const off = writable ? "" : " disabled";
  const rows = items.map((r) => {
    const i = names.indexOf(r.name);
    const up = names.slice(), down = names.slice();
    if (i > 0) [up[i - 1], up[i]] = [up[i], up[i - 1]];
    if (i < names.length - 1) [down[i + 1], down[i]] = [down[i], down[i + 1]];
    return `<tr><td>${i + 1}</td><td>${esc(r.name)}</td><td class="row">
      ${button(label("Move", shim, r.name, "up"), t("moveUp"), { order: shim, routes: up }, i === 0 ? " disabled" : off)}
      ${button(label("Move", shim, r.name, "down"), t("moveDown"), { order: shim, routes: down }, i === names.length - 1 ? " disabled" : off)}
      ${r.disabled ? button(label("Enable", shim, r.name), t("enable"), { post: routePath(shim, r.name, "enable") })
        : button(label("Disable", shim, r.name), t("disable"), { post: routePath(shim, r.name, "disable") })}
      ${pinned === r.name ? "" : button(label("Pin", shim, r.name), t("pin"), { pin: shim, route: r.name })}
    </td></tr>`;
  }).join("");
  return `<table><tbody>${rows}</tbody></table>${more}`;
}

function renderChain() {
  const writable = !!status.config.path;
  return shimNames().map((shim) => {
    const list = status.chain.routes[shim];
    const adoptName = `Adopt measured order ${shim}`;
    if (!list.length) {
      return `<div class="card" data-testid="chain-${esc(shim)}"><h3>${esc(shim)}</h3>
        <p class="empty" data-testid="no-routes-${esc(shim)}">${esc(t("noRoutes"))}</p>
        <ol class="effective" data-testid="effective-${esc(shim)}"></ol>
        <p class="row">${button(adoptName, t("adopt"), { order: shim, routes: [] }, " disabled")}</p></div>`;
    }
    const effective = status.chain.ordering.effective[shim] || [];
    const pinned = status.chain.ordering.pinned[shim];
    const shownEffective = visible(shim, effective, (e) => e.route);
    const items = shownEffective.items.map((e) =>
      `<li data-testid="effective-${esc(shim)}-${esc(e.route)}" class="${SKIPPED.includes(e.reason) ? "skipped" : ""}">
        <b>${esc(e.route)}</b> <span class="muted">${esc(reasonText(e))}</span>${e.score != null ? ` <span class="muted">${esc(t("score"))} ${e.score}</span>` : ""}</li>`).join("");
    const unpin = pinned ? button(`Unpin ${shim}`, `${t("unpin")} ${pinned}`, { pin: shim, route: null }) : "";
    const adopt = button(adoptName, t("adopt"), { order: shim, routes: measuredOrder(list) }, writable ? "" : " disabled");
    return `<div class="card" data-testid="chain-${esc(shim)}"><h3>${esc(shim)}</h3><div class="muted">${esc(t("effective"))}</div>
      <ol class="effective" data-testid="effective-${esc(shim)}">${items}</ol>${shownEffective.more}
      <div class="muted">${esc(t("configured"))}</div>${configuredRows(shim, list, pinned, writable)}
      <p class="row">${unpin}${adopt}</p></div>`;
  }).join("");
}

function routePath(shim, route, verb) {
  return `/routes/${encodeURIComponent(shim)}/${encodeURIComponent(route)}/${verb}`;
}

// The measured success rate: ok / tries, with the count ("100% (12/12)").
function success(r) {
  if (!r.attempts) return `<span class="muted">–</span>`;
  return `${Math.round((r.ok / r.attempts) * 100)}% <span class="muted">(${r.ok}/${r.attempts})</span>`;
}

function routeRow(shim, r) {
  const b = r.breaker || {};
  const breaker = `<span class="tag ${b.state === "closed" ? "ok" : "bad"}" title="${esc(b.state)}">${esc(t(b.state))}</span>` +
    (b.until ? ` <span class="muted">${esc(t("nextProbe"))} ${esc(fmtTime(b.until))}</span>` : "");
  const sp = r.outputSpeed || {};
  const speed = sp.perSecond != null ? `${sp.perSecond} ${esc(t(sp.unit))}` : "";
  const today = r.today || {};
  const cap = r.maxConcurrency ? r.maxConcurrency : `<span title="${esc(t("unlimited"))}">∞</span>`;
  const failure = r.lastFailure ? `${esc(r.lastFailure.code)} <span class="muted">${esc(fmtTime(r.lastFailure.at))}</span><br><small>${esc(localText(r.lastFailure.reason))}</small>` : "";
  const hours = (r.activeHours || []).join(", ") || t("allDay");
  const window = r.until ? `${esc(hours)}; ${esc(t("until"))} ${esc(r.until)}` : esc(hours);
  const via = r.proxy && r.proxy !== "none" ? `<br><small data-testid="proxy">⇄ ${esc(r.proxy)} <span class="muted">(${esc(r.proxySource)})</span></small>` : "";
  const changes = (r.changes || []).map((c) =>
    `<li>${esc(fmtTime(c.at))} <b title="${esc(c.change)}">${esc(t(`change-${c.change}`))}</b>${c.byHand ? ` (${esc(t("byHand"))})` : ""}` +
    `${c.until ? ` → ${esc(fmtTime(c.until))}` : ""}${c.cause ? `: ${esc(localText(c.cause))}` : ""}${c.source ? ` <span class="muted">[${esc(c.source)}]</span>` : ""}</li>`).join("");
  const scoreHint = `${t("scoreHint")}: ${Math.round((r.successRate ?? 0) * 100)}% × ${r.speedFactor ?? 1}`;
  return `<tr data-testid="route-${esc(shim)}-${esc(r.name)}"><td><b>${esc(r.name)}</b>${r.disabled ? ` <span class="tag warn">${esc(t("disabled"))}</span>` : ""}${r.cooldownUntil ? ` <span class="tag bad">${esc(t("cooling"))} ${esc(t("backAt"))} ${esc(fmtTime(r.cooldownUntil))}</span>` : ""}</td>
    <td data-testid="success-${esc(shim)}-${esc(r.name)}">${success(r)}</td>
    <td>${r.ttftMedianMs != null ? `${r.ttftMedianMs} ${esc(t("ms"))}` : ""}</td><td>${speed}</td>
    <td>${today.promptTokens ?? 0} / ${today.completionTokens ?? 0}</td>
    <td>${r.inFlight} / ${cap}</td><td>${breaker}</td><td data-testid="score-${esc(shim)}-${esc(r.name)}" title="${esc(scoreHint)}">${r.score}</td><td>${failure}</td><td>${window}${via}</td>
    <td>${changes ? `<details><summary>${(r.changes || []).length}</summary><ul class="changes">${changes}</ul></details>` : ""}</td></tr>`;
}

function renderRoutes() {
  return shimNames().map((shim) => {
    const list = status.chain.routes[shim];
    if (!list.length) return `<h3>${esc(shim)}</h3><p class="empty">${esc(t("noRoutes"))}</p>`;
    const { items, more } = visible(shim, list, (r) => r.name);
    const rows = items.map((r) => routeRow(shim, r)).join("");
    return `<h3>${esc(shim)}</h3><div class="scroll"><table><thead><tr>
      <th>${t("route")}</th><th title="${esc(t("successHint"))}">${t("success")}</th><th>${t("ttft")}</th><th>${t("speed")}</th><th>${t("tokensToday")}</th>
      <th>${t("inFlight")}</th><th>${t("breaker")}</th><th title="${esc(t("scoreHint"))}">${t("score")}</th><th>${t("lastFailure")}</th><th>${t("window")}</th><th>${t("changesH")}</th>
      </tr></thead><tbody>${rows}</tbody></table></div>${more}`;
  }).join("");
}

function renderFailed() {
  const failed = status.chain.failedToday || [];
  if (!failed.length) return `<p class="muted">${esc(t("noFailures"))}</p>`;
  const rows = failed.map((f) => `<tr><td>${esc(f.shim)}</td><td><b>${esc(f.route)}</b></td><td>${f.failures}</td>
    <td>${f.lastFailure ? `${esc(f.lastFailure.code)} ${esc(fmtTime(f.lastFailure.at))}: ${esc(localText(f.lastFailure.reason))}` : ""}</td>
    <td>${button(label("Restore", f.shim, f.route), t("restore"), { post: routePath(f.shim, f.route, "restore") })}</td></tr>`).join("");
  return `<table><thead><tr><th>${t("shim")}</th><th>${t("route")}</th><th>${t("failures")}</th><th>${t("lastFailure")}</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table><p>${button("Restore all", t("restoreAll"), { post: "/routes/reset" })}</p>`;
}

function tries(n) {
  return `${n} ${t(n === 1 ? "try" : "tries")}`;
}

// One route's part in a call: skipped (with the effective order's words),
// answered, or failed with its code.
function leg(r) {
  if (r.attempt === 0) {
    const why = r.skipped ? reasonText({ reason: r.skipped, until: r.until }) : localText(r.reason);
    return `<span class="muted" title="${esc(localText(r.reason))}">${esc(r.route)}: ${esc(t("skipped"))} (${esc(why)})</span>`;
  }
  const took = `${tries(r.tries)}, ${r.elapsedMs} ${t("ms")}`;
  if (r.ok) return `<b>${esc(r.route)}</b> ${esc(t("answered"))} (${esc(took)})`;
  return `${esc(r.route)} <span class="tag bad">${esc(r.code || "")}</span> (${esc(took)})${r.reason ? ` <small>${esc(localText(r.reason))}</small>` : ""}`;
}

function renderCalls() {
  const calls = status.chain.calls || [];
  if (!calls.length) return `<p class="muted">${esc(t("noCalls"))}</p>`;
  const rows = calls.slice(0, 20).map((c) => {
    const kind = `<span title="${esc(t("kindHint"))}: ${esc(c.kind)}" data-kind="${esc(c.kind)}">${esc(t(`kind-${c.kind}`))}</span>`;
    return `<tr><td>${esc(fmtTime(c.at))}</td><td>${esc(c.shim)}</td><td>${kind}</td>
      <td><span class="tag ${c.outcome === "ok" ? "ok" : "bad"}" title="${esc(c.outcome)}">${esc(t(c.outcome))}</span>${c.code ? ` ${esc(c.code)}` : ""}</td><td>${c.elapsedMs} ${esc(t("ms"))}</td><td>${c.routes.map(leg).join(" → ")}</td></tr>`;
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
    const rows = list.map((s) => `<tr><td>${esc(fmtTime(s.at))}</td><td>${esc(s.shim)}</td><td>${esc(s.from)} → <b>${esc(s.to)}</b></td><td>${esc(s.class || "")}</td></tr>`).join("");
    return `<h3 data-session="${esc(session)}">${esc(t("session"))}: ${session ? `<code>${esc(session)}</code>` : esc(t("noSession"))}</h3>
      <table><thead><tr><th>${t("time")}</th><th>${t("shim")}</th><th>${t("from")} → ${t("to")}</th><th>${t("cls")}</th></tr></thead><tbody>${rows}</tbody></table>`;
  }).join("");
}

function renderExchanges() {
  return shimNames().map((shim) => {
    const s = status[`${shim}Shim`] || {};
    const list = s.recentExchanges || [];
    const rows = list.map((x) => `<tr><td>${esc(fmtTime(x.at))}</td>
      <td>${x.beforeCount} → ${x.afterCount} ${esc(t("messages"))}</td><td>${x.beforeContent} → ${x.afterContent} ${esc(t("chars"))}</td>
      <td><span class="tag ${x.shrank ? "ok" : ""}">${esc(x.shrank ? t("shrank") : x.changed ? t("grew") : t("unchanged"))}</span></td></tr>`).join("");
    return `<div class="card" data-testid="exchanges-${esc(shim)}"><h3>${esc(shim)}</h3>${list.length
      ? `<table><tbody>${rows}</tbody></table>` : `<p class="muted">${esc(t("noExchanges"))}</p>`}</div>`;
  }).join("");
}

// The capture proxy (`/status` `capture`): whether it listens, what it
// decrypted, tunnelled and handed to the shims, and each host's row; a
// host tunnelled after its client refused the certificate says why.
function renderCapture() {
  const c = status.capture;
  if (!c) return "";
  if (!c.listen) return `<p class="muted" data-testid="capture-off">${esc(t("captureOff"))}</p>`;
  const counters = [
    ["capIntercepted", c.connections.intercepted], ["capTunnelled", c.connections.tunnelled],
    ["capHanded", c.requests.handed], ["capForwarded", c.requests.forwarded],
    ["capAbsolute", c.requests.absolute], ["capRefusals", c.clientRefusals],
  ].map(([k, v]) => `<div><dt>${esc(t(k))}</dt><dd data-testid="capture-${k}">${v ?? 0}</dd></div>`).join("");
  const state = c.listening
    ? `<span class="tag ok">${esc(t("captureUp"))}</span>`
    : `<span class="tag bad">${esc(t("captureDown"))}</span> ${esc(c.startError || "")}`;
  const handed = Object.entries(c.handed || {}).map(([s, n]) => `${esc(s)} ${n}`).join(" · ");
  const implicit = Object.values(c.implicitRoutes || {}).flat();
  const ignored = c.ignoredProxySetting
    ? `<p class="empty" data-testid="capture-ignored">${esc(t("capIgnored", { source: c.ignoredProxySetting }))}</p>` : "";
  const rows = (c.hosts || []).map((h) => {
    const tunnelled = h.tunnelledSince != null;
    const mode = `<span class="tag ${tunnelled ? "warn" : h.mode === "intercept" ? "ok" : ""}" data-testid="capture-mode-${esc(h.host)}">${esc(t(`cap-${h.mode}`))}</span>`;
    const why = tunnelled
      ? `<div class="note">${esc(t("capWhy"))}: ${esc(h.why)}${h.lastRefusal ? ` — ${esc(t("capLastRefusal"))} ${esc(fmtTime(h.lastRefusal.at))}: ${esc(h.lastRefusal.reason)}` : ""}</div>` : "";
    const error = h.lastError ? `<div class="note">${esc(t("lastError"))}: ${esc(h.lastError)}</div>` : "";
    return `<tr data-testid="capture-row-${esc(h.host)}"><td><code>${esc(h.host)}</code>${why}${error}</td><td>${mode}</td>
      <td>${h.intercepted}</td><td>${h.tunnelled}</td><td>${h.handed}</td><td>${h.forwarded}</td><td>${h.clientRefusals}</td></tr>`;
  }).join("");
  const head = ["capHost", "capMode", "capIntercepted", "capTunnelled", "capHanded", "capForwarded", "capRefusals"]
    .map((k) => `<th>${esc(t(k))}</th>`).join("");
  return `<div class="card" data-testid="capture-card"><h3>${esc(t("capture"))} <code>${esc(c.addr || c.listen)}</code> ${state}</h3>
    <dl class="counters">${counters}</dl>
    ${handed ? `<p><span class="muted">${esc(t("capHanded"))}:</span> ${handed}</p>` : ""}
    ${implicit.length ? `<p><span class="muted">${esc(t("capImplicit"))}:</span> ${implicit.map((r) => `<code>${esc(r)}</code>`).join(" ")}</p>` : ""}
    ${ignored}
    <div class="scroll"><table><thead><tr>${head}</tr></thead><tbody>${rows}</tbody></table></div></div>`;
}

// Times are the browser's; the config zone (the provider's
// day) is named where it differs. "local" is the server's own zone, most
// often the browser's too (both on this machine).
function renderZoneNote(zone) {
  const note = document.getElementById("zone-note");
  const browser = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const differs = zone && zone !== "local" && zone !== "fixed" && zone !== browser;
  note.hidden = !differs;
  note.textContent = differs ? t("zoneNote", { browser, zone }) : "";
}

function renderHeader() {
  const secs = Math.round(status.uptimeMs / 1000);
  const up = `${Math.floor(secs / 3600)}${t("hours")} ${Math.floor(secs / 60) % 60}${t("minutes")} ${secs % 60}${t("seconds")}`;
  document.getElementById("meta").textContent = `${t("version")} ${status.version} · ${t("uptime")} ${up}`;
  const live = document.getElementById("live");
  const stale = Date.now() - lastOk > 3000;
  live.textContent = stale ? t("stale") : `${t("updated")} ${fmtTime(lastOk)}`;
  live.classList.toggle("stale", stale);
  const mode = document.getElementById("mode");
  for (const option of mode.options) option.textContent = t(`mode-${option.value}`);
  if (document.activeElement !== mode) mode.value = status.chain.ordering.mode;
  mode.disabled = !status.config.path;
  document.getElementById("mode-note").textContent = status.config.path
    ? `${t("writesTo")} ${status.config.path}` : t("noFile");
  // Reload re-reads the file: what SIGHUP does on Unix, and the way on
  // Windows, which has no HUP.
  document.getElementById("reload").disabled = !status.config.path;
  document.getElementById("reload-note").textContent = reloadedAt ? `${t("reloaded")} ${fmtTime(reloadedAt)}` : "";
  renderZoneNote(status.chain.ordering.zone);
  const box = document.getElementById("filter");
  box.placeholder = t("filterHint");
  box.setAttribute("aria-label", t("filter"));
  document.getElementById("filter-row").hidden =
    !Object.values(status.chain.routes).some((list) => list.length > COLLAPSE_AT);
}

function render() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  for (const el of document.querySelectorAll("[data-t]")) el.textContent = t(el.dataset.t);
  if (!status) return;
  renderHeader();
  set("shims", renderShims());
  set("savings", renderSavings());
  set("capture", renderCapture());
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

// Each read is numbered; a read that started before the newest applied
// one (a poll in flight while an action answered) is dropped.
let asked = 0;
let applied = 0;
async function refresh() {
  const mine = ++asked;
  try {
    const [s, w] = await Promise.all([getJson("/status"), getJson("/switches")]);
    if (mine < applied) return;
    applied = mine;
    status = s;
    switches = w.switches || [];
    lastOk = Date.now();
  } catch (e) {
    // Shown as "not updating"; the last data stays on screen.
  } finally {
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

// What an action's answer says, applied to the page's copy of /status so
// it redraws at once: every answer carries the new effective order; the
// action itself says what else changed.
function patch(action, answer) {
  const chain = status && status.chain;
  if (!chain || !answer) return;
  const shim = answer.shim || action.order || action.pin || (action.post || "").split("/")[2];
  const shimOf = (name) => decodeURIComponent(name || "");
  if (answer.effective && !Array.isArray(answer.effective)) Object.assign(chain.ordering.effective, answer.effective);
  else if (answer.effective && shimOf(shim) in chain.ordering.effective) chain.ordering.effective[shimOf(shim)] = answer.effective;
  if (action.mode) chain.ordering.mode = answer.mode || action.mode;
  if (action.pin) chain.ordering.pinned[action.pin] = action.route;
  if (action.order && answer.configured) {
    const byName = new Map(chain.routes[action.order].map((r) => [r.name, r]));
    chain.routes[action.order] = answer.configured.map((n) => byName.get(n)).filter(Boolean);
  }
  const verb = /\/routes\/([^/]+)\/([^/]+)\/(enable|disable)$/.exec(action.post || "");
  if (verb) {
    const route = (chain.routes[shimOf(verb[1])] || []).find((r) => r.name === shimOf(verb[2]));
    if (route) route.disabled = verb[3] === "disable";
  }
}

let reloadedAt = 0;
async function act(action) {
  try {
    let answer;
    if (action.post) answer = await post(action.post);
    if (action.post === "/reload") reloadedAt = Date.now();
    else if (action.pin) answer = await post(`/routes/${encodeURIComponent(action.pin)}/pin`, { route: action.route });
    else if (action.order) answer = await post(`/routes/${encodeURIComponent(action.order)}/order`, { routes: action.routes });
    else if (action.mode) answer = await post("/ordering", { mode: action.mode });
    showError("");
    patch(action, answer);
    applied = ++asked;
  } catch (e) {
    showError(e.message);
  }
  shown.clear();
  render();
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
  const more = ev.target.closest("button[data-expand]");
  if (more) {
    const shim = more.dataset.expand;
    if (expanded.has(shim)) expanded.delete(shim);
    else expanded.add(shim);
    render();
  }
});
document.getElementById("filter").addEventListener("input", (ev) => {
  filter = ev.target.value;
  render();
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
