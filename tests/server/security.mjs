// security.mjs — issue 33's exposure and robustness checks on the main test
// server (started with --cors-origin https://ok.example --alias other-name):
// no CORS header unless an allowed origin asks, other origins refused,
// JSON-only bodies, unknown model names 404, a NUL in a string refused,
// oversized prompts refused by their bytes before tokenizing, logit_bias,
// echo and logprobs on /v1/completions (together: the prompt's logprobs), and errors that are always JSON.
import { client, test, run, assert, eq, raw, greedy, BASE, MODEL } from './lib.mjs';

const ALLOWED = 'https://ok.example';
const body = (o) => JSON.stringify({ model: MODEL, max_tokens: 4, temperature: 0, ...o });

function isError(r, status, code) {
  eq(r.status, status, `status (${r.text.slice(0, 200)})`);
  assert(r.json && r.json.error && typeof r.json.error.message === 'string', `not a JSON error: ${r.text.slice(0, 200)}`);
  if (code !== undefined) eq(r.json.error.code, code, 'code');
}

test('no Access-Control-Allow-Origin without an allowed Origin', async () => {
  for (const [path, method] of [['/health', 'GET'], ['/v1/models', 'GET'], ['/v1/completions', 'POST']]) {
    const r = await raw(path, { method, body: method === 'POST' ? body({ prompt: 'hi' }) : undefined });
    eq(r.status, 200, path);
    eq(r.headers.get('access-control-allow-origin'), null, `${path} has a CORS header`);
  }
});

test('another site is refused (403), its preflight gets no CORS header', async () => {
  const evil = { Origin: 'https://evil.example' };
  isError(await raw('/v1/chat/completions', { headers: evil, body: body({ messages: [{ role: 'user', content: 'hi' }] }) }), 403);
  const pre = await raw('/v1/chat/completions', { method: 'OPTIONS', headers: { ...evil, 'Access-Control-Request-Method': 'POST' } });
  eq(pre.headers.get('access-control-allow-origin'), null, 'preflight allowed another site');
  // the "simple" request a page can send without a preflight: text/plain
  isError(await raw('/v1/completions', { headers: { ...evil, 'Content-Type': 'text/plain' }, body: body({ prompt: 'hi' }) }), 403);
});

test('--cors-origin: the allowed origin gets its header and a preflight', async () => {
  const r = await raw('/v1/completions', { headers: { Origin: ALLOWED }, body: body({ prompt: 'hi' }) });
  eq(r.status, 200);
  eq(r.headers.get('access-control-allow-origin'), ALLOWED);
  const pre = await raw('/v1/completions', { method: 'OPTIONS', headers: { Origin: ALLOWED, 'Access-Control-Request-Method': 'POST' } });
  eq(pre.status, 204);
  eq(pre.headers.get('access-control-allow-origin'), ALLOWED);
  assert(/content-type/i.test(pre.headers.get('access-control-allow-headers') || ''), 'no allowed headers');
});

test("the server's own page (same origin) may post", async () => {
  const r = await raw('/v1/completions', { headers: { Origin: BASE }, body: body({ prompt: 'hi' }) });
  eq(r.status, 200);
  eq(r.headers.get('access-control-allow-origin'), null);
});

test('JSON endpoints take only application/json (415)', async () => {
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx'])
    isError(await raw('/v1/completions', { headers: { 'Content-Type': type }, body: body({ prompt: 'hi' }) }), 415);
  eq((await raw('/v1/completions', { headers: { 'Content-Type': 'application/json; charset=utf-8' }, body: body({ prompt: 'hi' }) })).status, 200);
});

test('unknown model names 404 (model_not_found); the id, file name and --alias are accepted', async () => {
  const r = await raw('/v1/chat/completions', { body: body({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }) });
  isError(r, 404, 'model_not_found');
  eq(r.json.error.param, 'model');
  try {
    await client.completions.create({ model: 'nope', prompt: 'hi', max_tokens: 2 });
    assert(false, 'no error');
  } catch (e) { eq(e.status, 404); }
  for (const m of [MODEL, 'other-name', 'stories260K.gguf']) {
    const r = await raw('/v1/completions', { body: body({ model: m, prompt: 'hi' }) });
    eq(r.status, 200, m);
    eq(r.json.model, m, 'the answer names the model as asked'); // as llama-server does
  }
  const none = await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', max_tokens: 2 }) });
  eq(none.status, 200, 'no model');
  eq(none.json.model, MODEL, 'no model asked: the server id');
});

test('a NUL in a string is refused, not silently cut', async () => {
  isError(await raw('/v1/completions', { body: '{"prompt": "Once upon\\u0000 a time", "max_tokens": 2}' }), 400);
  isError(await raw('/v1/chat/completions', { body: '{"messages": [{"role": "user", "content": "a\\u0000b"}]}' }), 400);
  // an escaped backslash before u0000 is text, not a NUL
  eq((await raw('/v1/completions', { body: '{"prompt": "a\\\\u0000", "max_tokens": 2}' })).status, 200);
});

test('an oversized prompt is refused by its bytes, fast', async () => {
  const big = 'the cat sat on the mat. '.repeat(250000); // 6 MB
  const t0 = Date.now();
  const r = await raw('/v1/completions', { body: JSON.stringify({ prompt: big, max_tokens: 1 }) });
  const ms = Date.now() - t0;
  isError(r, 400, 'context_length_exceeded');
  assert(/bytes/.test(r.json.error.message), r.json.error.message);
  assert(ms < 1000, `took ${ms} ms`);
});

test('logit_bias steers sampling; bad ones are 400', async () => {
  const ref = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 1, temperature: 0, logprobs: 1 });
  const first = ref.choices[0].logprobs.tokens[0];
  // SentencePiece puts a space token before a text: find the id whose piece is the token
  const tok = async (text) => (await raw('/tokenize', { body: JSON.stringify({ content: text, with_pieces: true }) })).json.tokens;
  const id = (await tok(first)).find((t) => t.piece === first);
  assert(id, `no single token for '${first}'`);
  const banned = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 1, temperature: 0, logprobs: 1,
    logit_bias: { [id.id]: -100 } });
  assert(banned.choices[0].logprobs.tokens[0] !== first, 'a -100 bias did not ban the greedy token');
  const forced = (await tok(' dragon')).pop(); // "on"
  const f = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 3, temperature: 0,
    logit_bias: { [forced.id]: 100 } });
  assert(f.choices[0].text.startsWith(forced.piece), `'${f.choices[0].text}' does not start with '${forced.piece}'`);
  isError(await raw('/v1/completions', { body: body({ prompt: 'x', logit_bias: { abc: 1 } }) }), 400);
  isError(await raw('/v1/completions', { body: body({ prompt: 'x', logit_bias: { 5: 300 } }) }), 400);
});

test('echo puts the prompt before the completion, streaming or not', async () => {
  const plain = await greedy('Once upon a time', 10);
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, echo: true });
  eq(r.choices[0].text, 'Once upon a time' + plain);
  const s = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, echo: true, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.text ?? '';
  eq(text, 'Once upon a time' + plain);
});

// The loglikelihood of evaluation harnesses (lm-evaluation-harness's local-completions: prompt [[ids]],
// echo, logprobs 1, max_tokens 1, then token_logprobs[ctxlen:-1]): the prompt's tokens with their
// logprobs, each equal to what a request ending just before that token says of it.
test('echo with logprobs: the prompt\'s token logprobs, as the next-token logprobs of shorter prompts', async () => {
  const ids = (await raw('/tokenize', { body: body({ content: 'Once upon a time there was a cat', add_special: true }) })).json.tokens;
  const r = (await raw('/v1/completions', { body: body({ prompt: [ids], echo: true, logprobs: 3, max_tokens: 1, temperature: 0 }) })).json;
  const lp = r.choices[0].logprobs;
  eq(lp.tokens.length, ids.length + 1, 'the prompt\'s tokens, then the generated one');
  eq([lp.token_logprobs[0], lp.top_logprobs[0]], [null, null], 'the first token has nothing before it');
  eq(lp.tokens.join(''), r.choices[0].text);
  for (let i = 1; i < ids.length; i++) {
    const one = (await raw('/v1/completions', { body: body({ prompt: ids.slice(0, i), max_tokens: 1, temperature: 0, logprobs: 3 }) })).json;
    const top = one.choices[0].logprobs.top_logprobs[0];
    eq(Object.keys(lp.top_logprobs[i]), Object.keys(top), `position ${i}: the same top tokens`);
    for (const k of Object.keys(top)) assert(Math.abs(lp.top_logprobs[i][k] - top[k]) < 1e-3, `position ${i} '${k}': ${lp.top_logprobs[i][k]} vs ${top[k]}`);
    if (lp.tokens[i] in top) assert(Math.abs(lp.token_logprobs[i] - top[lp.tokens[i]]) < 1e-3, `position ${i}'s own logprob`);
    assert(lp.token_logprobs[i] <= 0 && lp.token_logprobs[i] <= Math.max(...Object.values(top)) + 1e-3);
  }
  // max_tokens 0 scores the prompt alone; n > 1 shares it; a stream sends it with the echoed prompt
  const z = (await raw('/v1/completions', { body: body({ prompt: [ids], echo: true, logprobs: 1, max_tokens: 0, n: 2 }) })).json;
  eq(z.choices.map((c) => c.logprobs.token_logprobs), [lp.token_logprobs.slice(0, -1), lp.token_logprobs.slice(0, -1)]);
  eq(z.usage.completion_tokens, 0);
  const s = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 2, temperature: 0, echo: true, logprobs: 1, stream: true });
  const chunks = [];
  for await (const ch of s) if (ch.choices[0]?.logprobs) chunks.push(ch.choices[0].logprobs);
  eq(chunks[0].token_logprobs[0], null);
  eq(chunks[0].tokens.join('').trim(), 'Once upon a time');
});

test('completions logprobs: tokens, token_logprobs, top_logprobs, text_offset', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, logprobs: 3, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  eq(lp.tokens.length, 6);
  eq(lp.token_logprobs.length, 6);
  eq(lp.top_logprobs.length, 6);
  eq(lp.tokens.join(''), r.choices[0].text);
  assert(lp.top_logprobs.every((m) => Object.keys(m).length >= 1 && Object.keys(m).length <= 3), JSON.stringify(lp.top_logprobs));
  // streamed, the chunks' text offsets go on from one chunk to the next
  const s = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, logprobs: 3, ignore_eos: true, stream: true });
  const offsets = [];
  for await (const ch of s) offsets.push(...(ch.choices[0]?.logprobs?.text_offset ?? []));
  eq(offsets, lp.text_offset);
});

test('errors are JSON everywhere: 404, 405, 401-less routes, 413, 415', async () => {
  isError(await raw('/nope', { method: 'GET' }), 404);
  isError(await raw('/v1/models', { method: 'POST', body: '{}' }), 405);
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'a'.repeat(9 << 20) }) }), 413);
});

await run();
