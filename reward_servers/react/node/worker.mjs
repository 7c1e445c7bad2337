// Persistent Node worker of the React reward server.
//
// Protocol: one JSON object per line on stdin, one JSON object per line on
// stdout, matched by "id"; requests are handled concurrently.
//   {"id": 1, "op": "ping"}
//   {"id": 2, "op": "warm", "lint": true, "render": false}
//   {"id": 3, "op": "compile", "code": "...", "lint": true, "bundle": true}
//       -> {"bundle": {"ok", "js", "heavy", "diagnostics": [{line, column, message}]},
//           "lint": [{line, column, rule, severity, message}]}
//   {"id": 4, "op": "render", "js": "<bundle>", "heavy": false, "timeout_ms": 5000,
//    "settle_ms": 30, "screenshot": true, "format": "png"}
//       -> {"ok", "timed_out", "infra", "runtime_errors", "blocked_requests", "blocked_urls",
//           "elements", "text_chars", "screenshot" (base64), "ms"}
// Responses: {"id": 1, "ok": true, "result": {...}} or {"id": 1, "ok": false, "error": "..."}.
// Nothing but protocol lines is written to stdout; logs go to stderr.
// `node worker.mjs --once` answers a single request read from stdin and exits
// (the naive process-per-item baseline of the benchmark).
//
// What it does lives in one module each: the bundler (bundler.mjs), the source-map decoder (sourcemap.mjs),
// ESLint (eslint.mjs), the page of a render (page.mjs) and the Chromium pool (chromium.mjs); this file is the
// request loop.
import readline from 'node:readline';

import { ALLOWED, buildVendor, bundle, defaultExportPatch, naiveBundle } from './bundler.mjs';
import { getBrowser, killBrowser, prewarmSlots, render } from './chromium.mjs';
import { getLinter, lint } from './eslint.mjs';
import { tailwindCss } from './page.mjs';

async function handle(req) {
  switch (req.op) {
    case 'ping': return { pong: true, pid: process.pid };
    case 'warm': {
      await buildVendor();
      if (req.lint !== false) getLinter();
      if (req.render) { await getBrowser(); await tailwindCss(''); await prewarmSlots(); }
      return { warm: true, allow_list: Object.keys(ALLOWED) };
    }
    case 'compile': {
      const out = {};
      if (req.bundle !== false) out.bundle = await bundle(req.code);
      if (req.lint !== false) {
        // lint what is bundled: with the appended default export (after the last line, so lines do not move)
        try { out.lint = lint(req.code + (defaultExportPatch(req.code) || '')); } catch (e) { out.lint = null; out.lint_error = String(e && e.message || e); }
      }
      return out;
    }
    case 'render': return render(req);
    case 'naive_compile': return { bundle: await naiveBundle(req.code), lint: lint(req.code) };
    case 'shutdown': setTimeout(async () => { await killBrowser(); process.exit(0); }, 10); return { bye: true };
    default: throw new Error(`unknown op ${req.op}`);
  }
}

function send(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

if (process.argv[2] === '--once') {
  // Naive mode (benchmark baseline only): one request from stdin, answer, exit.
  let buf = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (d) => { buf += d; });
  process.stdin.on('end', async () => {
    const req = JSON.parse(buf);
    try { send({ id: req.id, ok: true, result: await handle(req) }); } catch (e) { send({ id: req.id, ok: false, error: String(e) }); }
    await killBrowser();
    process.exit(0);
  });
} else {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    let req;
    try { req = JSON.parse(line); } catch (e) { send({ id: null, ok: false, error: 'bad json: ' + e.message }); return; }
    Promise.resolve().then(() => handle(req)).then(
      (result) => send({ id: req.id, ok: true, result }),
      (e) => send({ id: req.id, ok: false, error: String(e && e.stack || e).slice(0, 2000) }),
    );
  });
  rl.on('close', async () => { await killBrowser(); process.exit(0); });
  process.on('uncaughtException', (e) => { process.stderr.write('uncaught: ' + (e && e.stack || e) + '\n'); });
  process.on('unhandledRejection', (e) => { process.stderr.write('unhandled: ' + (e && e.stack || e) + '\n'); });
}
