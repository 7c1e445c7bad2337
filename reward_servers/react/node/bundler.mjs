// The bundler: a component's code -> one browser script (esbuild, allow-listed imports only, React & co. from a
// vendor script built once), its source map and its diagnostics on the component's lines.
import path from 'node:path';

import { require, ROOT } from './root.mjs';

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

export async function buildVendor() {
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
export function defaultExportPatch(code) {
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

export async function bundle(code) {
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
export async function naiveBundle(code) {
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
