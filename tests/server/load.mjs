// load.mjs — N concurrent streaming clients for T seconds against BRISK_URL.
// Reports completed requests, errors, time-to-first-token percentiles,
// aggregate generated tokens/s and the server's RSS before and after
// (LOAD_PID: the server's pid, read from /proc). Exits 1 on any error, and,
// with LOAD_RSS_SLACK_MB, when the server's RSS grew by more than that
// between the warm point and the end (a leak per request would).
//   LOAD_CLIENTS=64 LOAD_SECONDS=120 LOAD_MAX_TOKENS=128 node tests/server/load.mjs
import { readFileSync } from 'node:fs';
import { client, MODEL } from './lib.mjs';

const N = Number(process.env.LOAD_CLIENTS || 8), T = Number(process.env.LOAD_SECONDS || 5);
const MAX = Number(process.env.LOAD_MAX_TOKENS || 96), PID = process.env.LOAD_PID;
const words = ['cat', 'dog', 'ball', 'tree', 'sun', 'boat', 'bird', 'cake', 'park', 'friend'];

function rssMb() {
  if (!PID) return NaN;
  try {
    const m = readFileSync(`/proc/${PID}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) / 1024 : NaN;
  } catch { return NaN; }
}

const pct = (a, p) => (a.length ? a[Math.min(a.length - 1, Math.floor((p / 100) * a.length))] : NaN);

async function one(id, i, stats) {
  const t0 = performance.now();
  let first = 0, usage = null;
  const prompt = `Once upon a time, a ${words[(id + i) % words.length]} and a ${words[(id * 7 + i) % words.length]}`;
  const chat = (id + i) % 2 === 0;
  const s = chat
    ? await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: prompt }], max_tokens: MAX,
      temperature: 0.8, seed: id * 1000 + i, stream: true, stream_options: { include_usage: true } })
    : await client.completions.create({ model: MODEL, prompt, max_tokens: MAX, temperature: 0.8, seed: id * 1000 + i,
      stream: true, stream_options: { include_usage: true } });
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    const c = ch.choices[0];
    if (!first && c && ((c.delta && c.delta.content) || c.text)) first = performance.now();
  }
  if (!usage) throw new Error('no usage chunk');
  if (first) stats.ttft.push(first - t0);
  stats.tokens += usage.completion_tokens;
  stats.done++;
}

const stats = { done: 0, errors: 0, tokens: 0, ttft: [], errs: [] };
const rss0 = rssMb();
// RSS once warm (a sixth of the run: every slot has run) and at the end: flat means no leak per request
let rssWarm = NaN;
const warm = setTimeout(() => { rssWarm = rssMb(); }, (T * 1000) / 6);
const tEnd = performance.now() + T * 1000, t0 = performance.now();
await Promise.all(Array.from({ length: N }, async (_, id) => {
  for (let i = 0; performance.now() < tEnd; i++) {
    try { await one(id, i, stats); } catch (e) { stats.errors++; if (stats.errs.length < 5) stats.errs.push(String(e)); }
  }
}));
const secs = (performance.now() - t0) / 1000, rss1 = rssMb();
clearTimeout(warm);
stats.ttft.sort((a, b) => a - b);
console.log(`load: ${N} clients x ${secs.toFixed(1)} s: ${stats.done} completions, ${stats.errors} errors, ` +
  `${(stats.tokens / secs).toFixed(1)} tok/s aggregate, TTFT p50 ${pct(stats.ttft, 50).toFixed(1)} ms ` +
  `p90 ${pct(stats.ttft, 90).toFixed(1)} ms p99 ${pct(stats.ttft, 99).toFixed(1)} ms, ` +
  `server RSS ${rss0.toFixed(1)} MB at start, ${rssWarm.toFixed(1)} MB warm, ${rss1.toFixed(1)} MB at the end`);
for (const e of stats.errs) console.log(`  error: ${e}`);
const slack = Number(process.env.LOAD_RSS_SLACK_MB || NaN);
const grew = !Number.isNaN(slack) && !(rss1 - rssWarm <= slack);
if (grew) console.log(`  RSS grew by ${(rss1 - rssWarm).toFixed(1)} MB after warm-up (allowed ${slack} MB)`);
process.exit(stats.errors || !stats.done || grew ? 1 : 0);
