// hybrid.mjs — prefix caching on a hybrid model (qwen35: Gated DeltaNet
// layers, whose recurrent state cannot be rewound). The server snapshots the
// state at KV-block boundaries (16 tokens) of prompts, so a follow-up turn
// restarts from the latest snapshot inside the shared prefix.
// BRISK_URL: a server with --batch 16 (prompt chunks on block boundaries);
// BRISK_URL_NOCKPT: the same with --ctx-checkpoints 0, the uncached baseline
// (same chunks, so its greedy output must be the same token for token);
// BRISK_URL_BIG: one with the default --batch and --parallel 1.
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { client, test, run, assert, eq, raw, MODEL } from './lib.mjs';

const npm = resolve(process.env.BRISK_NPM || '.deps/npm/node_modules');
const { default: OpenAI } = await import(pathToFileURL(join(npm, 'openai/index.mjs')).href);
const cold = new OpenAI({ baseURL: `${process.env.BRISK_URL_NOCKPT}/v1`, apiKey: 'none', maxRetries: 0 });

const sys = { role: 'system', content: 'You are a helpful assistant who answers questions about the sea, ships, harbours and the weather at sea, in a few words.' };
const turn1 = [sys, { role: 'user', content: 'What is the tallest lighthouse in the world, and how tall is it?' }];
const chat = (c, messages, extra = {}) => c.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0, ...extra });
const cachedOf = (r) => r.usage.prompt_tokens_details.cached_tokens;
let turn2, hot;

const toks = async (s) => (await raw('/tokenize', { body: JSON.stringify({ content: s, add_special: true }) })).json.tokens;
const rendered = async (messages) => toks((await raw('/apply-template', { body: JSON.stringify({ messages }) })).json.prompt);
const common = (x, y) => { let i = 0; while (i < x.length && x[i] === y[i]) i++; return i; };

test('a follow-up turn restarts from a checkpoint: cached_tokens > 0, the same greedy output as uncached', async () => {
  const a = await chat(client, turn1), b = await chat(cold, turn1);
  eq(a.choices[0].message.content, b.choices[0].message.content, 'first turn');
  // the client sends back an edited answer (as thinking models' templates drop the
  // reasoning): the shared prefix ends inside the first prompt, not after the slot's cache
  turn2 = [...turn1, { role: 'assistant', content: 'The Jeddah Light, 133 metres.' }, { role: 'user', content: 'And the oldest one?' }];
  hot = await chat(client, turn2);
  const n1 = a.usage.prompt_tokens, lcp = common(await rendered(turn1), await rendered(turn2));
  const want = Math.floor(Math.min(lcp, n1) / 16) * 16;
  assert(want > 0 && lcp < n1 + a.usage.completion_tokens - 1, `the prompts do not test a checkpoint (first ${n1}, shared ${lcp})`);
  eq(cachedOf(hot), want, `cached tokens of the second turn (first prompt ${n1} tokens, ${lcp} shared)`);
  const ref = await chat(cold, turn2);
  eq(cachedOf(ref), 0, 'no checkpoints: nothing reused');
  eq(hot.choices[0].message.content, ref.choices[0].message.content, 'second turn with and without the cache hit');
  eq(hot.usage.completion_tokens, ref.usage.completion_tokens);
});

test('n = 2 on a hybrid: both choices share the prompt state and equal the greedy answer', async () => {
  const r = await chat(client, turn2, { n: 2 });
  assert(cachedOf(r) > 0, 'the repeated prompt reuses a checkpoint');
  eq(r.choices.map((c) => c.message.content), [hot.choices[0].message.content, hot.choices[0].message.content]);
});

test('an unaligned reuse realigns: the next chunk ends on a block boundary and is snapshotted', async () => {
  const p = 'The harbour master counted the boats every morning before the fishermen left.';
  const a = await client.completions.create({ model: MODEL, prompt: p, max_tokens: 1, temperature: 0 });
  const n = a.usage.prompt_tokens; // the slot now holds exactly these n tokens
  const b = p + ' Then he wrote the number into a big blue book that had belonged to his grandfather, and closed it.';
  const rb = await client.completions.create({ model: MODEL, prompt: b, max_tokens: 1, temperature: 0 });
  eq(cachedOf(rb), n, 'the whole sequence continues');
  const c = p + ' Then he wrote the number into a big blue book that had belonged to his grandfather, and opened it.';
  const tb = await toks(b), tc = await toks(c), lcp = common(tb, tc);
  const want = Math.floor(Math.min(lcp, tc.length - 1) / 16) * 16;
  assert(n % 16 !== 0 && want > n, `the prompts do not test a realigned chunk (n ${n}, lcp ${lcp})`);
  const rc = await client.completions.create({ model: MODEL, prompt: c, max_tokens: 1, temperature: 0 });
  eq(cachedOf(rc), want, `cached tokens (first ${n}, shared ${lcp} of ${tc.length})`);
});

test('the checkpoint nearest a prompt\'s end stays a few tokens before it (a re-rendered generation prompt)', async () => {
  if (!process.env.BRISK_URL_BIG) return; // a server with the default --batch (256)
  const big = new OpenAI({ baseURL: `${process.env.BRISK_URL_BIG}/v1`, apiKey: 'none', maxRetries: 0 });
  const ids = Array.from({ length: 60 }, (_, i) => (i * 7919 + 13) % 50000);
  // 49 tokens in one chunk: cut at 32 (the last boundary <= 49 - 4), not 48, then [32, 49)
  const a = await big.completions.create({ model: MODEL, prompt: ids.slice(0, 49), max_tokens: 1, temperature: 0 });
  eq(cachedOf(a), 0);
  // a follow-up that shares 47 tokens (the last two re-rendered) restarts at 32
  const b = await big.completions.create({ model: MODEL, prompt: [...ids.slice(0, 47), 7, 8, 9], max_tokens: 1, temperature: 0 });
  eq(cachedOf(b), 32);
});

await run();
