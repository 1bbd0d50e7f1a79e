#!/usr/bin/env node
// Parse Mermaid diagrams with the real `mermaid` library (under jsdom) so CI
// catches syntax that GitHub / mermaid.live would reject.
//
// Usage: node check.mjs <file.mmd | dir> [...]
//   - a directory argument is scanned (non-recursively) for `*.mmd` files
//   - prints `ok <file>` or `FAIL <file>: <error>` per file,
//     then `mermaid: N diagrams parsed, N rejected`; exit code 1 if anything failed (or no input).
import { readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { JSDOM } from 'jsdom';

// --- DOM globals: must exist BEFORE mermaid (and DOMPurify) are imported. ---
const dom = new JSDOM('<!DOCTYPE html><html><body></body></html>', {
  pretendToBeVisual: true,
  url: 'http://localhost/',
});
const { window } = dom;
const define = (name, value) => {
  try {
    if (globalThis[name] === undefined || name === 'window' || name === 'document') {
      Object.defineProperty(globalThis, name, { value, configurable: true, writable: true });
    }
  } catch {
    /* some globals (e.g. navigator on newer Node) are read-only getters; ignore */
  }
};
define('window', window);
define('document', window.document);
define('navigator', window.navigator);
for (const name of [
  'Element', 'HTMLElement', 'SVGElement', 'Node', 'Document', 'DocumentFragment',
  'DOMParser', 'XMLSerializer', 'MutationObserver', 'getComputedStyle',
  'requestAnimationFrame', 'cancelAnimationFrame', 'NodeFilter', 'Text', 'Comment',
]) {
  if (window[name] !== undefined) {
    define(name, typeof window[name] === 'function' && /^[a-z]/.test(name)
      ? window[name].bind(window)
      : window[name]);
  }
}

const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false, securityLevel: 'strict' });

async function collect(args) {
  const files = [];
  for (const arg of args) {
    const st = await stat(arg);
    if (st.isDirectory()) {
      const entries = (await readdir(arg)).filter((f) => f.endsWith('.mmd')).sort();
      for (const f of entries) files.push(path.join(arg, f));
    } else {
      files.push(arg);
    }
  }
  return files;
}

const args = process.argv.slice(2);
if (args.length === 0) {
  console.error('usage: node check.mjs <file.mmd | dir> [...]');
  process.exit(2);
}

let passed = 0;
let failed = 0;
let files;
try {
  files = await collect(args);
} catch (e) {
  console.error(`FAIL ${e.path ?? ''}: ${e.message}`);
  process.exit(1);
}
for (const file of files) {
  try {
    const text = await readFile(file, 'utf8');
    if (text.trim() === '') throw new Error('empty diagram');
    // parse() rejects on error (suppressErrors defaults to false).
    const res = await mermaid.parse(text);
    if (!res) throw new Error('mermaid.parse returned false');
    console.log(`ok ${file}`);
    passed += 1;
  } catch (e) {
    const msg = String(e?.message ?? e).replace(/\s+/g, ' ').trim();
    console.log(`FAIL ${file}: ${msg}`);
    failed += 1;
  }
}
console.log(`mermaid: ${passed} diagrams parsed, ${failed} rejected`);
if (files.length === 0) console.error('no .mmd files found');
process.exit(failed > 0 || files.length === 0 ? 1 : 0);
