// The page of one render: the bundle, the Tailwind CSS of its class names and the prelude that reports errors and
// says when the first commit has settled.
import path from 'node:path';

import { buildVendor } from './bundler.mjs';
import { require } from './root.mjs';

// Tailwind: classes compiled in Node from the bundle's string tokens.
// A fresh compiler per item (~15 ms of CPU once warm; the stylesheets are read once): a compiler's
// build() accumulates every candidate it has seen, so a shared one would give an item CSS rules
// for classes that earlier items used (a state leak between items).
const twSheets = new Map();
async function twStylesheet(id) {
  const fs = require('node:fs');
  const base = path.dirname(require.resolve('tailwindcss/package.json'));
  const rel = id === 'tailwindcss' ? 'index.css' : id.replace(/^tailwindcss\//, '').replace(/^\.\//, '');
  const p = path.join(base, rel.endsWith('.css') ? rel : rel + '.css');
  if (!twSheets.has(p)) twSheets.set(p, fs.readFileSync(p, 'utf8'));
  return { path: p, base: path.dirname(p), content: twSheets.get(p) };
}
export async function tailwindCss(js) {
  const tw = require('tailwindcss');
  const base = path.dirname(require.resolve('tailwindcss/package.json'));
  const compiler = await tw.compile('@import "tailwindcss";', { base, loadStylesheet: twStylesheet });
  const cands = new Set();
  for (const tok of js.split(/[\s"'`;{}<>\\]+/)) {
    if (tok.length > 0 && tok.length <= 120 && /^[!-]?[a-z0-9@*[][^\s]*$/i.test(tok)) cands.add(tok);
    if (cands.size >= 20000) break;
  }
  return compiler.build([...cands]);
}

function escapeScript(js) {
  return js.replace(/<\/(script)/gi, '<\\/$1').replace(/<!--/g, '<\\!--');
}
function escapeStyle(css) {
  return css.replace(/<\/(style)/gi, '<\\/$1');
}

const PRELUDE = `
window.__errors = [];
window.name = "";
window.__reportError = function (kind, e) {
  var msg = e && (e.stack || e.message) ? String(e.message || e) : String(e);
  var name = e && e.name ? e.name : "Error";
  var stack = e && e.stack ? String(e.stack).slice(0, 4000) : "";
  if (window.__errors.length < 20) window.__errors.push({ kind: kind, message: (msg.indexOf(name) === 0 ? msg : name + ": " + msg).slice(0, 500), stack: stack });
};
window.addEventListener("error", function (ev) { window.__reportError("pageerror", ev.error || ev.message); });
window.addEventListener("unhandledrejection", function (ev) { window.__reportError("unhandledrejection", ev.reason); });
window.__finish = function () {
  if (window.__finishing) return; window.__finishing = true;
  requestAnimationFrame(function () { requestAnimationFrame(function () {
    setTimeout(function () { window.__done = true; if (window.__onDone) window.__onDone(); }, window.__settleMs || 0);
  }); });
};
`;

export async function pageHtml(js, heavy, settleMs, tailwind) {
  const css = tailwind === false ? '' : await tailwindCss(js);
  const heavyJs = heavy ? await (await buildVendor()).heavyScript() : '';
  return '<!doctype html><html><head><meta charset="utf-8"><title>render</title>'
    + `<style>${escapeStyle(css)}</style>`
    + `<script>window.__settleMs=${Number(settleMs) || 0};${PRELUDE}</script>`
    + '</head><body><div id="root"></div>'
    + (heavy ? `<script>${escapeScript(heavyJs)}</script>` : '')
    + `<script>${escapeScript(js)}\n//# sourceURL=bundle.js\n</script>`
    + '<script>if (!window.__started) window.__finish();</script>'
    + '</body></html>';
}
