// ESLint: a component's findings (line, column, rule, severity, message) under one normalised flat config.
import path from 'node:path';

import { require, ROOT } from './root.mjs';

let linter = null;
// Two configs with the same rules: espree (fast) first; code that espree cannot parse (TypeScript syntax)
// is linted again with the typescript-eslint parser, whose verdict then stands.
let lintConfigs = null;
export function getLinter() {
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

export function lint(code) {
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
