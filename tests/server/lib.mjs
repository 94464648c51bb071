// lib.mjs — a tiny test runner and the shared client for the server tests.
// BRISK_URL is the server's base URL (http://127.0.0.1:PORT); BRISK_NPM the
// node_modules folder holding `openai` (make deps puts it in .deps/npm).
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const npm = resolve(process.env.BRISK_NPM || '.deps/npm/node_modules');
const { default: OpenAI } = await import(pathToFileURL(join(npm, 'openai/index.mjs')).href);

export const BASE = process.env.BRISK_URL || 'http://127.0.0.1:8080';
export const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: process.env.BRISK_KEY || 'none', maxRetries: 0 });
// the served model's name: any other is a 404 (models.list needs the key when one is set)
export const MODEL = (await client.models.list()).data[0].id;

const tests = [];
export function test(name, fn) { tests.push({ name, fn }); }

export function assert(cond, msg) { if (!cond) throw new Error(msg || 'assertion failed'); }
export function eq(a, b, msg) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`${msg || 'not equal'}: ${sa} !== ${sb}`);
}

export async function run() {
  let failed = 0;
  for (const t of tests) {
    const t0 = Date.now();
    try {
      await t.fn();
      console.log(`ok   ${t.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  console.log(`${tests.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

// Raw HTTP for what the client library will not send.
export async function raw(path, { method = 'POST', body, headers = {} } = {}) {
  const res = await fetch(`${BASE}${path}`, {
    method, body, headers: { 'Content-Type': 'application/json', ...headers },
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

export async function metrics() {
  const r = await fetch(`${BASE}/metrics`, { headers: { Authorization: `Bearer ${process.env.BRISK_KEY || 'none'}` } });
  const m = {};
  for (const line of (await r.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

// Greedy completion text of a prompt (non-streaming).
export async function greedy(prompt, max_tokens = 40, extra = {}) {
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens, temperature: 0, ...extra });
  return r.choices[0].text;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
