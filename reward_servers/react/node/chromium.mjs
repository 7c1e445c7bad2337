// The Chromium pool: one warm browser, N slots (a context and its page each), a render on a fresh origin per item.
import { buildVendor } from './bundler.mjs';
import { pageHtml } from './page.mjs';
import { require } from './root.mjs';
import { runtimeLines } from './sourcemap.mjs';

// One warm Chromium; N "slots", each a browser context (own renderer process)
// with one page that is navigated afresh, to a new origin, for every render:
// storage is per origin and cookies are cleared, so nothing leaks between
// items.  A slot whose page hangs is closed and replaced (the browser too if
// the context cannot be closed).
let pw = null;
let browser = null;
let browserStarting = null;
let browserGen = 0;
const RENDER_SLOTS = Math.max(1, Number(process.env.REACT_REWARD_RENDER_SLOTS || 2));
const CHROME_ARGS = [
  '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-dev-shm-usage', '--disable-extensions', '--disable-sync', '--no-first-run',
  '--disable-default-apps', '--disable-component-update', '--mute-audio', '--hide-scrollbars',
  // software compositing (--disable-gpu) in a thread of the browser process instead of a GPU process
  '--in-process-gpu',
  // One --disable-features switch (Chromium keeps only the last one, so this list also carries Playwright's own)
  '--disable-features=' + [
    // Playwright's defaults (its switch comes first and would otherwise be overridden)
    'AvoidUnnecessaryBeforeUnloadCheckSync', 'DestroyProfileOnBrowserClose', 'HttpsUpgrades',
    'HttpsFirstBalancedModeAutoEnable', 'LensOverlay', 'MediaRouter', 'PaintHolding', 'ThirdPartyStoragePartitioning',
    'AvoidCorsURLLoaderRestartOnRedirect', 'OptimizationHints', 'NetworkTimeServiceQuerying', 'AimEnabled',
    'PreconnectToSearch',
    // ours
    'Translate', 'BackForwardCache',
    // a spare renderer is pre-started for the wrong context with two slots: one process launch per render
    'SpareRendererForSitePerProcess',
  ].join(','),
  // defence in depth: requests not intercepted by the route handler go nowhere
  '--host-resolver-rules=MAP * ~NOTFOUND',
  '--proxy-server=http://127.0.0.1:9', '--proxy-bypass-list=<-loopback>',
  '--force-webrtc-ip-handling-policy=disable_non_proxied_udp',
];

export async function getBrowser() {
  if (browser && browser.isConnected()) return browser;
  if (browserStarting) return browserStarting;
  browserStarting = (async () => {
    if (!pw) pw = require('playwright-core');
    const before = childPids();
    const b = await pw.chromium.launch({
      executablePath: process.env.REACT_REWARD_CHROMIUM || '/usr/bin/chromium',
      headless: true, args: CHROME_ARGS, timeout: 60000,
    });
    // Playwright's Browser does not expose its process: remember the child that the launch added, so that a
    // browser that does not close (a renderer stuck in a loop) can still be killed
    b.pids = [...childPids()].filter((p) => !before.has(p));
    browser = b;
    browserGen += 1;
    b.on('disconnected', () => { if (browser === b) browser = null; });
    return b;
  })();
  try { return await browserStarting; } finally { browserStarting = null; }
}

export async function killBrowser() {
  const b = browser;
  browser = null;
  liveSlots -= freeSlots.length; // idle slots die with the browser; busy ones are released by their render
  freeSlots.length = 0;
  if (!b) return;
  let closed = false;
  try {
    closed = await Promise.race([b.close().then(() => true), new Promise((r) => setTimeout(() => r(false), 2000))]);
  } catch { /* ignore */ }
  if (closed) return;
  // still our child (not a reused pid): kill it and everything under it (zygote, renderers)
  const parents = parentMap();
  const victims = (b.pids || []).filter((pid) => parents.get(pid) === process.pid);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, ppid] of parents) if (victims.includes(ppid) && !victims.includes(pid)) { victims.push(pid); grew = true; }
  }
  for (const pid of victims) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
}

// pid -> parent pid of every process (Linux /proc; empty elsewhere).
function parentMap() {
  const fs = require('node:fs');
  const out = new Map();
  let entries = [];
  try { entries = fs.readdirSync('/proc'); } catch { return out; }
  for (const d of entries) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      out.set(Number(d), Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* exited */ }
  }
  return out;
}

function childPids() {
  return new Set([...parentMap()].filter(([, ppid]) => ppid === process.pid).map(([pid]) => pid));
}

const freeSlots = [];
let liveSlots = 0;
const slotWaiters = [];
let originSeq = 0;

async function newSlot() {
  const b = await getBrowser();
  const slot = { gen: browserGen, current: null, ctx: null, page: null };
  slot.ctx = await b.newContext({
    viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1, serviceWorkers: 'block',
    acceptDownloads: false, javaScriptEnabled: true,
  });
  // React & co. (the light vendor script, ~250 kB) run in every new document as an init script instead of being
  // inlined into each page: the page is ~15 kB instead of ~270 kB, and V8 compiles the (constant) vendor source
  // once per renderer instead of once per navigation (an inline script's cache key includes its page's URL,
  // which is a fresh origin for every render).
  // Top-level http documents only (not iframes, nor the about:blank that parks an idle slot).
  const { light } = await buildVendor();
  await slot.ctx.addInitScript({ content: `(function () { if (window !== window.top || location.protocol !== 'http:') return;\n${light}\n})();` });
  await slot.ctx.route('**/*', async (route) => {
    const req = route.request();
    const cur = slot.current;
    const url = req.url();
    if (cur && url === cur.url && !cur.served && req.isNavigationRequest() && req.frame() === slot.page.mainFrame()) {
      cur.served = true;
      await route.fulfill({ status: 200, contentType: 'text/html; charset=utf-8', body: cur.html }).catch(() => {});
      return;
    }
    if (cur) { cur.blocked += 1; if (cur.urls.length < 20) cur.urls.push(url.slice(0, 200)); }
    // a 204 answer to a navigation cancels it (the page stays); others fail
    if (req.isNavigationRequest()) await route.fulfill({ status: 204, body: '' }).catch(() => {});
    else await route.abort('blockedbyclient').catch(() => {});
  });
  if (slot.ctx.routeWebSocket) {
    await slot.ctx.routeWebSocket(/.*/, (ws) => {
      const cur = slot.current;
      if (cur) { cur.blocked += 1; if (cur.urls.length < 20) cur.urls.push(ws.url().slice(0, 200)); }
      ws.close().catch(() => {});
    });
  }
  slot.page = await slot.ctx.newPage();
  slot.cdp = await slot.ctx.newCDPSession(slot.page);
  slot.page.on('dialog', (d) => d.dismiss().catch(() => {}));
  return slot;
}

// Waits for the page's __finish (two frames + settle after the first commit), then reports what it saw.
const PAGE_INFO = `new Promise(function (resolve) {
  function report() {
    resolve({
      errors: window.__errors || [],
      elements: document.getElementsByTagName('*').length,
      text: (document.body && document.body.innerText || '').length,
      url: location.href,
    });
  }
  if (window.__done) report(); else window.__onDone = report;
})`;

async function cdpEval(slot, expression) {
  const r = await slot.cdp.send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
  if (r.exceptionDetails) throw new Error('page evaluation failed: ' + (r.exceptionDetails.exception && r.exceptionDetails.exception.description || r.exceptionDetails.text));
  return r.result.value;
}

async function acquireSlot() {
  while (true) {
    while (freeSlots.length) {
      const s = freeSlots.pop();
      if (s.gen === browserGen && browser && browser.isConnected()) {
        clearTimeout(s.idleTimer);
        if (s.ready && !(await s.ready)) { await destroySlot(s); liveSlots -= 1; continue; }
        s.ready = null;
        return s;
      }
      liveSlots -= 1;
    }
    if (liveSlots < RENDER_SLOTS) {
      liveSlots += 1;
      try { return await newSlot(); } catch (e) { liveSlots -= 1; throw e; }
    }
    await new Promise((r) => slotWaiters.push(r));
  }
}

function releaseSlot(slot, healthy) {
  if (healthy) freeSlots.push(slot); else liveSlots -= 1;
  const w = slotWaiters.shift();
  if (w) w();
}

async function destroySlot(slot) {
  const closed = await Promise.race([
    slot.ctx.close().then(() => true, () => false), new Promise((r) => setTimeout(() => r(false), 3000))]);
  if (!closed && slot.gen === browserGen) await killBrowser(); // a renderer that cannot be closed
}

export async function render(req) {
  await buildVendor();
  const timeoutMs = req.timeout_ms || 5000;
  const t0 = Date.now();
  const phases = {};
  let tp = t0;
  const mark = (k) => { const n = Date.now(); phases[k] = n - tp; tp = n; };
  const html = await pageHtml(req.js, req.heavy, req.settle_ms ?? 30, req.tailwind);
  mark('html');
  let slot;
  try { slot = await acquireSlot(); } catch (e) {
    return { ok: false, infra: true, timed_out: false, runtime_errors: ['browser unavailable: ' + String(e && e.message || e).split('\n')[0]], blocked_requests: 0, blocked_urls: [], elements: 0, text_chars: 0, screenshot: null, ms: Date.now() - t0 };
  }
  mark('slot');
  const gen = slot.gen;
  originSeq += 1;
  const cur = { url: `http://r${originSeq}.render.invalid/`, html, served: false, blocked: 0, urls: [] };
  slot.current = cur;
  let timedOut = false;
  const page = slot.page;
  const work = (async () => {
    await slot.ctx.clearCookies();
    await page.goto(cur.url, { waitUntil: 'commit', timeout: timeoutMs });
    mark('goto');
    // one raw CDP evaluation (Playwright's page.evaluate installs its utility script in every new document)
    const info = await cdpEval(slot, PAGE_INFO);
    mark('run');
    let screenshot = null;
    if (req.screenshot !== false) {
      const fmt = req.format === 'jpeg' ? 'jpeg' : 'png';
      try {
        const shot = await slot.cdp.send('Page.captureScreenshot', {
          format: fmt, optimizeForSpeed: true, ...(fmt === 'jpeg' ? { quality: 85 } : {}),
          clip: { x: 0, y: 0, width: 1280, height: 800, scale: 1 },
        });
        screenshot = shot.data; // base64 already
      } catch {
        const buf = await page.screenshot({ type: fmt, timeout: timeoutMs, ...(fmt === 'jpeg' ? { quality: 85 } : {}) });
        screenshot = buf.toString('base64');
      }
      mark('screenshot');
    }
    return { info, screenshot };
  })();
  let timer;
  const limit = new Promise((_, rej) => { timer = setTimeout(() => { timedOut = true; rej(new Error('render time limit')); }, timeoutMs); });
  let healthy = false;
  try {
    const { info, screenshot } = await Promise.race([work, limit]);
    const errors = info.errors.map((e) => e.message);
    const lines = runtimeLines(info.errors, req.map);
    if (info.url !== cur.url) errors.push(`page navigated away to ${info.url.slice(0, 200)}`);
    slot.current = null;
    // The next render's navigation replaces this page; meanwhile a liveness check (awaited by the next
    // acquire) drops a slot whose page hung after the screenshot. A slot idle for 1 s is parked on
    // about:blank so that a finished item's timers and animations stop using CPU.
    slot.ready = Promise.race([cdpEval(slot, '1').then(() => true, () => false),
      new Promise((r) => setTimeout(() => r(false), 1500))]);
    slot.idleTimer = setTimeout(() => {
      slot.ready = slot.ready.then((ok) => ok && page.goto('about:blank', { timeout: 3000 }).then(() => true, () => false));
    }, 1000);
    healthy = true;
    return {
      ok: errors.length === 0, timed_out: false, runtime_errors: errors, runtime_error_lines: lines,
      blocked_requests: cur.blocked, blocked_urls: cur.urls,
      elements: info.elements, text_chars: info.text, screenshot, ms: Date.now() - t0, phases,
    };
  } catch (e) {
    work.catch(() => {});
    slot.current = null;
    const msg = String(e && e.message || e).split('\n')[0];
    const infra = !timedOut && (gen !== browserGen || /closed|crash|disconnected/i.test(msg));
    return {
      ok: false, timed_out: timedOut, infra,
      runtime_errors: [timedOut ? `render exceeded ${timeoutMs} ms (infinite loop or hung page)` : msg],
      blocked_requests: cur.blocked, blocked_urls: cur.urls, elements: 0, text_chars: 0, screenshot: null,
      ms: Date.now() - t0,
    };
  } finally {
    clearTimeout(timer);
    if (!healthy) await destroySlot(slot);
    releaseSlot(slot, healthy);
  }
}

// Open every slot once per browser with an empty page (renderer process started, vendor init script compiled,
// screenshot path used) so that the first items do not pay for it.
let prewarmedGen = -1;
export async function prewarmSlots() {
  if (prewarmedGen === browserGen) return;
  prewarmedGen = browserGen;
  const empty = { js: '', heavy: false, timeout_ms: 20000, settle_ms: 0, screenshot: true };
  await Promise.all(Array.from({ length: RENDER_SLOTS }, () => render(empty).catch(() => null)));
}
