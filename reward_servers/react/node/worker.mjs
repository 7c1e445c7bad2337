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
import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
// The folder with package.json and node_modules: the server passes it (reward_servers/react/node_deps.py: an
// installed package keeps it outside site-packages); run by hand in a clone, the package folder.
const ROOT = path.resolve(process.env.REACT_REWARD_NODE_DIR || path.join(HERE, '..'));
const require = createRequire(path.join(ROOT, 'package.json'));

// ---------------------------------------------------------------- allow-list
// Bare module ids that generated components may import.  Everything else
// (other packages, node built-ins, URLs, relative/absolute file paths, CSS)
// is a compile failure with the import's line and column.
export const ALLOWED = {
  react: 'react',
  'react/jsx-runtime': 'react/jsx-runtime',
  'react/jsx-dev-runtime': 'react/jsx-dev-runtime',
  'react-dom': 'react-dom',
  'react-dom/client': 'react-dom/client',
  'lucide-react': 'lucide-react',
  clsx: 'clsx',
  'tailwind-merge': 'tailwind-merge',
};
// Modules that live in the (large) second vendor script, only inlined into a
// page whose bundle imports them.
const HEAVY = new Set(['lucide-react']);

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const RESERVED = new Set(['default', '__esModule']);

let esbuild = null;
let vendor = null; // {light: string, heavy: string, exports: {mod: [names]}}

async function loadEsbuild() {
  if (!esbuild) esbuild = require('esbuild');
  return esbuild;
}

async function buildVendor() {
  if (vendor) return vendor;
  const eb = await loadEsbuild();
  const exportsOf = {};
  for (const mod of Object.keys(ALLOWED)) {
    if (HEAVY.has(mod)) continue; // lucide-react: names come from its index file (lucideIndex), no import
    const ns = await import(require.resolve(mod));
    const names = new Set(Object.keys(ns).filter((k) => IDENT.test(k) && !RESERVED.has(k)));
    const def = ns.default;
    if (def && typeof def === 'object') for (const k of Object.keys(def)) if (IDENT.test(k) && !RESERVED.has(k)) names.add(k);
    exportsOf[mod] = names;
  }
  // react & co. live in the light vendor script; the heavy one reuses them
  const external = {
    name: 'vendor-external',
    setup(build) {
      build.onResolve({ filter: /^react(-dom)?(\/.*)?$/ }, (args) => (args.importer === '<stdin>' ? null : { path: args.path, namespace: 'vendor' }));
      build.onLoad({ filter: /.*/, namespace: 'vendor' }, (args) => ({ contents: shimSource(args.path), loader: 'js' }));
    },
  };
  const mk = async (mods, plugins) => {
    const lines = ['window.__vendor = window.__vendor || {};'];
    mods.forEach((m) => lines.push(`window.__vendor[${JSON.stringify(m)}] = require(${JSON.stringify(m)});`));
    const r = await eb.build({
      stdin: { contents: lines.join('\n'), resolveDir: ROOT, loader: 'js' },
      bundle: true, minify: true, format: 'iife', write: false, logLevel: 'silent',
      define: { 'process.env.NODE_ENV': '"production"' }, target: 'es2020', plugins,
    });
    return r.outputFiles[0].text;
  };
  const light = await mk(Object.keys(ALLOWED).filter((m) => !HEAVY.has(m)), []);
  let heavy = null;
  exportsOf['lucide-react'] = new Set(lucideIndex().keys());
  // the whole of lucide-react (~1 MB) is built on first use only (namespace/default imports)
  const heavyScript = () => { if (!heavy) heavy = mk([...HEAVY], [external]); return heavy; };
  vendor = { light, heavyScript, exports: exportsOf };
  return vendor;
}

function shimSource(mod) {
  return `module.exports = window.__vendor[${JSON.stringify(mod)}];`;
}

// Named imports from allow-listed modules must exist (the shims are dynamic).
const NAMED_IMPORT = /\bimport\s+(?:type\s+)?(?:[A-Za-z_$][\w$]*\s*,\s*)?\{([^}]*)\}\s*from\s*(["'])([^"']+)\2/g;
function checkNamedImports(code, js) {
  const out = [];
  let m;
  NAMED_IMPORT.lastIndex = 0;
  while ((m = NAMED_IMPORT.exec(code)) !== null) {
    const mod = m[3];
    if (!Object.prototype.hasOwnProperty.call(ALLOWED, mod) || /^import\s+type\b/.test(m[0])) continue;
    const names = vendor.exports[mod];
    const bodyStart = m.index + m[0].indexOf('{') + 1;
    const spec = /(?:^|,)\s*((?:type\s+)?)([A-Za-z_$][\w$]*)(?:\s+as\s+[A-Za-z_$][\w$]*)?\s*(?=,|$)/g;
    let s;
    while ((s = spec.exec(m[1])) !== null) {
      if (s[1]) continue; // inline `type X`
      if (!names.has(s[2]) && new RegExp('import_[\\w$]+\\.' + s[2].replace(/\$/g, '\\$') + '\\b').test(js)) {
        const off = bodyStart + s.index + s[0].indexOf(s[2]);
        const before = code.slice(0, off);
        const line = before.split('\n').length;
        const column = off - before.lastIndexOf('\n');
        out.push({ line, column, message: `No matching export in "${mod}" for import "${s[2]}"` });
      }
    }
  }
  return out;
}

// lucide-react: named imports are bundled from the icons' own files (fast, small pages); a namespace or
// default import falls back to the whole library in the heavy vendor script.
let lucideMap = null; // exported name -> [absolute file, imported name]
let LUCIDE_DIR = null;
function lucideIndex() {
  if (lucideMap) return lucideMap;
  const fs = require('node:fs');
  const entry = require.resolve('lucide-react').replace(/[\\/]cjs[\\/].*$/, '/esm/lucide-react.mjs');
  LUCIDE_DIR = path.dirname(entry);
  lucideMap = new Map();
  const src = fs.readFileSync(entry, 'utf8');
  const re = /export\s*\{([^}]*)\}\s*from\s*'([^']+)'/g;
  let m;
  while ((m = re.exec(src)) !== null) {
    const file = path.join(LUCIDE_DIR, m[2]);
    for (const part of m[1].split(',')) {
      const mm = part.trim().match(/^([\w$]+)(?:\s+as\s+([\w$]+))?$/);
      if (mm) lucideMap.set(mm[2] || mm[1], [file, mm[1]]);
    }
  }
  return lucideMap;
}

const LUCIDE_IMPORT = /\bimport\s+([^'";]*?)\s*from\s*(["'])lucide-react\2/g;
function lucideRequest(code) {
  // -> null (no lucide import), {full: true}, or {names: Set}
  const names = new Set();
  let found = false;
  let m;
  LUCIDE_IMPORT.lastIndex = 0;
  while ((m = LUCIDE_IMPORT.exec(code)) !== null) {
    found = true;
    const clause = m[1].trim();
    if (!clause.startsWith('{') || !clause.endsWith('}')) return { full: true };
    for (const part of clause.slice(1, -1).split(',')) {
      const mm = part.trim().match(/^(?:type\s+)?([\w$]+)/);
      if (mm && !/^type\s/.test(part.trim())) names.add(mm[1]);
    }
  }
  if (/\b(?:require|import)\s*\(\s*["']lucide-react["']/.test(code)) return { full: true };
  return found ? { names } : null;
}

// Find a component name when the code has no default export.
function defaultExportPatch(code) {
  if (/\bexport\s+default\b/.test(code) || /\bas\s+default\b/.test(code)) return '';
  const names = [];
  const re = /^\s*(?:export\s+)?(?:(?:async\s+)?function\s*\*?\s*([A-Z][A-Za-z0-9_$]*)|(?:const|let|var)\s+([A-Z][A-Za-z0-9_$]*)\s*(?::[^=]+)?=|class\s+([A-Z][A-Za-z0-9_$]*))/gm;
  let m;
  while ((m = re.exec(code)) !== null) names.push(m[1] || m[2] || m[3]);
  if (!names.length) return null;
  const pick = names.includes('App') ? 'App' : names[names.length - 1];
  return `\nexport default ${pick};`;
}

const HARNESS = `
import * as M from "__component__";
import { createElement, Component } from "react";
import { flushSync } from "react-dom";
import { createRoot } from "react-dom/client";
const report = (kind, e) => window.__reportError(kind, e);
let C = M.default;
if (typeof C !== "function" && !(C && typeof C === "object" && C.$$typeof)) {
  const cands = Object.keys(M).filter((k) => /^[A-Z]/.test(k) && typeof M[k] === "function");
  C = cands.includes("App") ? M.App : M[cands[0]];
}
class Boundary extends Component {
  constructor(p) { super(p); this.state = { failed: false }; }
  static getDerivedStateFromError() { return { failed: true }; }
  componentDidCatch(e) { report("boundary", e); }
  render() { return this.state.failed ? null : this.props.children; }
}
window.__started = true;
if (!C) {
  report("harness", new Error("no React component to render (no default export or capitalised function)"));
  window.__finish();
} else {
  const root = createRoot(document.getElementById("root"), {
    onUncaughtError: (e) => report("uncaught", e),
    onRecoverableError: (e) => report("recoverable", e),
  });
  try {
    flushSync(() => root.render(createElement(Boundary, null, createElement(C))));
  } catch (e) {
    report("render", e);
  }
  window.__finish();
}
`;

function bundlePlugin(code, patch) {
  const lucide = lucideRequest(code);
  return {
    name: 'allow-list',
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) => {
        if (args.kind === 'entry-point') return { path: 'harness', namespace: 'virtual' };
        if (args.namespace === 'lucide' && LUCIDE_DIR && args.path.startsWith(LUCIDE_DIR)) return { path: args.path, namespace: 'file' };
        if (LUCIDE_DIR && args.importer.startsWith(LUCIDE_DIR) && args.path.startsWith('.')) {
          return { path: path.join(path.dirname(args.importer), args.path), namespace: 'file' };
        }
        if (args.path === 'lucide-react' && lucide && !lucide.full) return { path: 'lucide-react', namespace: 'lucide' };
        if (args.path === '__component__' && args.importer === 'harness') return { path: 'component.tsx', namespace: 'virtual' };
        if (Object.prototype.hasOwnProperty.call(ALLOWED, args.path)) return { path: args.path, namespace: 'vendor' };
        let why = 'is not on the allow-list (' + Object.keys(ALLOWED).join(', ') + ')';
        if (/^[a-z][a-z0-9+.-]*:/i.test(args.path)) why = 'is a URL or node: import; only allow-listed packages can be imported';
        else if (/^(\.|\/|~)/.test(args.path)) why = 'is a file path; the component must be a single self-contained file';
        else if (require('node:module').builtinModules.includes(args.path.split('/')[0])) why = 'is a Node.js built-in module';
        return { errors: [{ text: `Cannot import "${args.path}": ${why}` }] };
      });
      build.onLoad({ filter: /.*/, namespace: 'virtual' }, (args) => {
        if (args.path === 'harness') return { contents: HARNESS, loader: 'js' };
        return { contents: code + (patch || ''), loader: 'tsx' };
      });
      build.onLoad({ filter: /.*/, namespace: 'vendor' }, (args) => ({ contents: shimSource(args.path), loader: 'js' }));
      build.onLoad({ filter: /.*/, namespace: 'lucide' }, () => {
        const map = lucideIndex();
        const lines = [];
        for (const n of lucide.names) {
          const hit = map.get(n);
          if (hit) lines.push(`export { ${hit[1]} as ${n} } from ${JSON.stringify(hit[0])};`);
        }
        return { contents: lines.join('\n') || 'export {};', loader: 'js', resolveDir: LUCIDE_DIR };
      });
    },
  };
}

function esbuildMessages(msgs) {
  return msgs.map((m) => {
    const inUser = m.location && m.location.file && m.location.file.includes('component.tsx');
    return {
      line: inUser ? m.location.line : null,
      column: inUser ? m.location.column + 1 : null,
      message: m.text.replace('"lucide:lucide-react"', '"lucide-react"'),
    };
  });
}

async function bundle(code) {
  const eb = await loadEsbuild();
  await buildVendor();
  lucideIndex();
  const patch = defaultExportPatch(code);
  try {
    const r = await eb.build({
      entryPoints: ['harness'], bundle: true, write: false, format: 'iife', target: 'es2020',
      platform: 'browser', jsx: 'automatic', jsxImportSource: 'react', minify: false,
      logLevel: 'silent', metafile: true, legalComments: 'none', charset: 'utf8',
      define: { 'process.env.NODE_ENV': '"production"' },
      // keep every import (TypeScript would drop unused ones): a forbidden import fails even if unused
      tsconfigRaw: { compilerOptions: { verbatimModuleSyntax: true } },
      plugins: [bundlePlugin(code, patch === null ? '' : patch)],
      // a source map lets the renderer map runtime-error stack frames back to lines of the component
      sourcemap: 'external', sourcesContent: false, outfile: 'bundle.js',
    });
    const jsFile = r.outputFiles.find((f) => f.path.endsWith('.js'));
    const mapFile = r.outputFiles.find((f) => f.path.endsWith('.map'));
    const missing = checkNamedImports(code, jsFile.text);
    if (missing.length) return { ok: false, diagnostics: missing, warnings: esbuildMessages(r.warnings) };
    const usedMods = Object.keys(r.metafile.inputs).filter((k) => k.startsWith('vendor:')).map((k) => k.slice(7));
    return {
      ok: true, js: jsFile.text.replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n'), map: mapFile ? mapFile.text : null,
      diagnostics: [],
      warnings: esbuildMessages(r.warnings),
      heavy: usedMods.some((m) => HEAVY.has(m)),
    };
  } catch (e) {
    if (e && Array.isArray(e.errors)) return { ok: false, diagnostics: esbuildMessages(e.errors), warnings: [] };
    return { ok: false, diagnostics: [{ line: null, column: null, message: String(e && e.message || e) }], warnings: [] };
  }
}

// Naive baseline (benchmark only): what a straightforward per-item script does -- bundle the code with the
// real packages from node_modules (same allow-list check), no vendor split, no caches.
async function naiveBundle(code) {
  const eb = await loadEsbuild();
  const guard = {
    name: 'allow-list-naive',
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) => {
        if (args.importer === '<stdin>' && !Object.prototype.hasOwnProperty.call(ALLOWED, args.path)) {
          return { errors: [{ text: `Cannot import "${args.path}"` }] };
        }
        return undefined;
      });
    },
  };
  const patch = defaultExportPatch(code) || '';
  try {
    const r = await eb.build({
      stdin: { contents: code + patch, loader: 'tsx', resolveDir: ROOT, sourcefile: 'component.tsx' },
      bundle: true, write: false, format: 'iife', target: 'es2020', platform: 'browser', jsx: 'automatic',
      logLevel: 'silent', define: { 'process.env.NODE_ENV': '"production"' }, plugins: [guard],
      tsconfigRaw: { compilerOptions: { verbatimModuleSyntax: true } },
    });
    return { ok: true, bytes: r.outputFiles[0].contents.length, diagnostics: [] };
  } catch (e) {
    return { ok: false, diagnostics: esbuildMessages(e.errors || []) };
  }
}

// Source maps: decode esbuild's map once per render, look up generated (line, column) -> component line.
const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
function decodeMap(mapText) {
  const map = JSON.parse(mapText);
  const src = map.sources.findIndex((x) => x.endsWith('component.tsx'));
  const lines = [];
  let srcIdx = 0, srcLine = 0;
  for (const group of map.mappings.split(';')) {
    const segs = [];
    let genCol = 0;
    for (const seg of group.split(',')) {
      if (!seg) continue;
      const vals = [];
      let v = 0, shift = 0;
      for (const ch of seg) {
        const d = B64.indexOf(ch);
        v += (d & 31) << shift;
        if (d & 32) { shift += 5; } else { vals.push(v & 1 ? -(v >>> 1) : v >>> 1); v = 0; shift = 0; }
      }
      genCol += vals[0];
      if (vals.length >= 4) { srcIdx += vals[1]; srcLine += vals[2]; segs.push([genCol, srcIdx, srcLine]); }
    }
    lines.push(segs);
  }
  return { src, lines };
}

function componentLine(decoded, line, column) {
  // line, column: 1-based positions in the bundle (as in V8 stack traces)
  const segs = decoded.lines[line - 1];
  if (!segs || !segs.length) return null;
  let hit = null;
  for (const sg of segs) { if (sg[0] <= column - 1) hit = sg; else break; }
  if (!hit) hit = segs[0];
  return hit[1] === decoded.src ? hit[2] + 1 : null;
}

function runtimeLines(errors, mapText) {
  if (!mapText) return [];
  let decoded;
  try { decoded = decodeMap(mapText); } catch { return []; }
  if (decoded.src < 0) return [];
  const out = [];
  for (const e of errors) {
    for (const m of String(e.stack || '').matchAll(/bundle\.js:(\d+):(\d+)/g)) {
      const ln = componentLine(decoded, Number(m[1]), Number(m[2]));
      if (ln) { if (!out.includes(ln)) out.push(ln); break; } // innermost frame inside the component
    }
  }
  return out;
}

// -------------------------------------------------------------------- ESLint
let linter = null;
// Two configs with the same rules: espree (fast) first; code that espree cannot parse (TypeScript syntax)
// is linted again with the typescript-eslint parser, whose verdict then stands.
let lintConfigs = null;
function getLinter() {
  if (linter) return [linter, lintConfigs];
  const { Linter } = require('eslint');
  const js = require('@eslint/js');
  const globals = require('globals');
  const react = require('eslint-plugin-react');
  const reactHooks = require('eslint-plugin-react-hooks');
  const tsParser = require('@typescript-eslint/parser');
  linter = new Linter({ configType: 'flat' });
  const make = (parser) => [
    { files: ['**/*.tsx'], ...js.configs.recommended },
    {
      files: ['**/*.tsx'],
      plugins: { react, 'react-hooks': reactHooks },
      languageOptions: {
        ...(parser ? { parser } : {}),
        ecmaVersion: 'latest',
        sourceType: 'module',
        parserOptions: { ecmaFeatures: { jsx: true } },
        globals: { ...globals.browser, ...globals.es2021, JSX: 'readonly' }, // JSX: the global type namespace of @types/react
      },
      settings: { react: { version: '19.0' } },
      rules: {
        ...react.configs.recommended.rules,
        ...react.configs['jsx-runtime'].rules,
        ...reactHooks.configs.recommended.rules,
        // noise for generated single-file components:
        'react/prop-types': 'off',
        'react/react-in-jsx-scope': 'off',
        'react/jsx-uses-react': 'off',
        'react/display-name': 'off',
        'react/no-unescaped-entities': 'warn',
        'no-unused-vars': ['warn', { args: 'none', ignoreRestSiblings: true, varsIgnorePattern: '^React$' }],
        'no-undef': 'error',
        'no-redeclare': 'off', // TypeScript overloads
      },
    },
  ];
  // Normalise each config once: Linter.verify() would rebuild it for every call (most of the lint time).
  const normalise = (cfg) => {
    try {
      const fca = path.join(path.dirname(require.resolve('eslint')), 'config', 'flat-config-array.js');
      const { FlatConfigArray } = require(fca);
      const arr = new FlatConfigArray(cfg, { basePath: ROOT });
      arr.normalizeSync();
      return arr;
    } catch (e) {
      process.stderr.write('eslint: using an unnormalised config (slower): ' + e.message + '\n');
      return cfg;
    }
  };
  lintConfigs = { espree: normalise(make(null)), ts: normalise(make(tsParser)) };
  return [linter, lintConfigs];
}

function lint(code) {
  const [l, cfgs] = getLinter();
  const filename = path.join(ROOT, 'component.tsx');
  let msgs = l.verify(code, cfgs.espree, { filename });
  if (msgs.some((m) => m.fatal)) msgs = l.verify(code, cfgs.ts, { filename });
  return msgs.map((m) => ({
    line: m.line || 1,
    column: m.column || 1,
    rule: m.ruleId || (m.fatal ? 'parse-error' : null),
    severity: m.fatal ? 'fatal' : m.severity === 2 ? 'error' : 'warning',
    message: m.message,
  }));
}

// --------------------------------------------------------------------- render
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

async function getBrowser() {
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

async function killBrowser() {
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

// ----- Tailwind: classes compiled in Node from the bundle's string tokens
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
async function tailwindCss(js) {
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

async function pageHtml(js, heavy, settleMs, tailwind) {
  const css = tailwind === false ? '' : await tailwindCss(js);
  const heavyJs = heavy ? await vendor.heavyScript() : '';
  return '<!doctype html><html><head><meta charset="utf-8"><title>render</title>'
    + `<style>${escapeStyle(css)}</style>`
    + `<script>window.__settleMs=${Number(settleMs) || 0};${PRELUDE}</script>`
    + '</head><body><div id="root"></div>'
    + (heavy ? `<script>${escapeScript(heavyJs)}</script>` : '')
    + `<script>${escapeScript(js)}\n//# sourceURL=bundle.js\n</script>`
    + '<script>if (!window.__started) window.__finish();</script>'
    + '</body></html>';
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
  await slot.ctx.addInitScript({ content: `(function () { if (window !== window.top || location.protocol !== 'http:') return;\n${vendor.light}\n})();` });
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

async function render(req) {
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
async function prewarmSlots() {
  if (prewarmedGen === browserGen) return;
  prewarmedGen = browserGen;
  const empty = { js: '', heavy: false, timeout_ms: 20000, settle_ms: 0, screenshot: true };
  await Promise.all(Array.from({ length: RENDER_SLOTS }, () => render(empty).catch(() => null)));
}

// ------------------------------------------------------------------ dispatch
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
