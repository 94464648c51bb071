// api.mjs — the OpenAI endpoints through the official client: chat, streaming,
// include_usage, completions, stop strings, logprobs, tools, prefix caching, n > 1.
import { client, test, run, assert, eq, raw, metrics, greedy, MODEL } from './lib.mjs';

const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];

test('GET /v1/models lists the model', async () => {
  const list = await client.models.list();
  assert(list.data.length === 1 && typeof list.data[0].id === 'string', JSON.stringify(list.data));
});

test('GET /v1/models/{id}: one model, by any of its names; an unknown one is a 404', async () => {
  const m = await client.models.retrieve(MODEL);
  eq([m.id, m.object, m.owned_by], [MODEL, 'model', 'brisk']);
  const alias = await client.models.retrieve('other-name');
  eq(alias.id, 'other-name');
  const r = await raw('/v1/models/nope', { method: 'GET' });
  eq(r.status, 404);
  eq(r.json.error.code, 'model_not_found');
});

test('GET /props and /slots (llama-server shapes)', async () => {
  const p = await raw('/props', { method: 'GET' });
  eq(p.status, 200);
  eq(p.json.total_slots, 4);
  eq(p.json.default_generation_settings.n_ctx, 2048);
  assert(typeof p.json.chat_template === 'string' && p.json.model_alias === MODEL, JSON.stringify(p.json));
  eq(p.json.embeddings, false);
  // a running request shows on its slot
  const stream = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 200,
    stream: true, ignore_eos: true });
  let busy = null;
  for await (const ch of stream) {
    if (busy) continue;
    const s = await raw('/slots', { method: 'GET' });
    eq(s.status, 200);
    eq(s.json.length, 4);
    busy = s.json.find((x) => x.is_processing);
  }
  assert(busy && busy.n_prompt_tokens > 0 && busy.n_ctx === 2048 && busy.next_token[0].n_decoded >= 1, JSON.stringify(busy));
  eq((await raw('/props', { method: 'POST', body: '{}' })).status, 405);
});

test('GET /health', async () => {
  const r = await raw('/health', { method: 'GET' });
  eq(r.status, 200);
  eq(r.json, { status: 'ok' });
});

test('chat: non-streaming shape and usage', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 0 });
  eq(r.object, 'chat.completion');
  const c = r.choices[0];
  eq(c.message.role, 'assistant');
  assert(typeof c.message.content === 'string' && c.message.content.length > 0, 'empty content');
  assert(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  assert(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0, JSON.stringify(r.usage));
  eq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert(typeof r.usage.prompt_tokens_details.cached_tokens === 'number', 'no cached_tokens');
});

test('chat: streaming equals non-streaming; include_usage chunk', async () => {
  const ref = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 30, temperature: 0 });
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 30, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, role = null, n = 0;
  for await (const ch of stream) {
    n++;
    eq(ch.object, 'chat.completion.chunk');
    if (ch.usage) {
      eq(ch.choices, [], 'usage chunk has empty choices');
      usage = ch.usage;
      continue;
    }
    const d = ch.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  eq(role, 'assistant');
  eq(text, ref.choices[0].message.content, 'streamed text');
  eq(finish, ref.choices[0].finish_reason);
  assert(usage && usage.completion_tokens === ref.usage.completion_tokens, JSON.stringify(usage));
  assert(n > 3, 'too few chunks');
});

test('completions: streaming equals non-streaming', async () => {
  const ref = await greedy('Once upon a time', 40);
  const stream = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stream: true });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.text ?? '';
  eq(text, ref);
});

test('max_tokens: finish_reason length and the exact count', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 7, temperature: 0, ignore_eos: true });
  eq(r.choices[0].finish_reason, 'length');
  eq(r.usage.completion_tokens, 7);
});

test('stop strings: cut before the stop, nothing leaks into the stream', async () => {
  const full = await greedy('Once upon a time', 60);
  const stop = full.slice(20, 26); // a few characters that span tokens
  const want = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 60, temperature: 0, stop: [stop, 'zzzz'] });
  eq(r.choices[0].text, want, 'non-streaming');
  eq(r.choices[0].finish_reason, 'stop');
  const stream = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 60, temperature: 0, stop, stream: true });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.text ?? '';
  eq(text, want, 'streaming');
});

test('seeded sampling is reproducible', async () => {
  const a = await greedy('The dog', 30, { temperature: 1.0, seed: 42, top_k: 0, top_p: 1, min_p: 0 });
  const b = await greedy('The dog', 30, { temperature: 1.0, seed: 42, top_k: 0, top_p: 1, min_p: 0 });
  eq(a, b);
});

test('chat logprobs: one entry per token, top_logprobs sorted, greedy = top', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  eq(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    eq(t.top_logprobs.length, 3);
    assert(t.logprob <= 0 && Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-5, JSON.stringify(t));
    assert(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob, 'not sorted');
    assert(Array.isArray(t.bytes), 'bytes');
  }
});

test('tools: accepted, answer well-formed', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, max_tokens: 16, temperature: 0 });
  const c = r.choices[0];
  assert(['stop', 'length', 'tool_calls'].includes(c.finish_reason), c.finish_reason);
  for (const tc of c.message.tool_calls ?? []) {
    eq(tc.type, 'function');
    JSON.parse(tc.function.arguments);
  }
  // a conversation holding a tool call and its result renders
  const r2 = await client.chat.completions.create({ model: MODEL, max_tokens: 4, temperature: 0, tools, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
  ] });
  assert(r2.choices.length === 1);
});

// parallel_tool_calls: several <tool_call> blocks are several calls, non-streamed and streamed
// (a tool_calls delta per call, each its own index); the grammar of tool_choice lets calls follow
// each other only with the field on (its default here: ChatML renders every call of a message)
const weather = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const callText = (city) => `"<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"${city}\\"}}\\n</tool_call>"`;
const TWO = `root ::= ${callText('Paris')} "\\n" ${callText('Rome')}`;

test('parallel tool calls: two calls parsed, streamed with distinct indexes', async () => {
  const body = { model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }], tools: weather, max_tokens: 400, temperature: 0, grammar: TWO };
  const r = await client.chat.completions.create(body);
  const c = r.choices[0];
  eq(c.finish_reason, 'tool_calls');
  eq(c.message.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]),
    [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
  assert(c.message.tool_calls[0].id !== c.message.tool_calls[1].id, 'ids');
  const s = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let finish;
  for await (const ch of s) {
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      if (!calls[d.index]) calls[d.index] = { id: d.id, name: d.function.name, args: '' };
      calls[d.index].args += d.function.arguments ?? '';
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  eq(finish, 'tool_calls');
  eq(calls.map((t) => [t.name, JSON.parse(t.args)]), [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
  assert(calls[0].id && calls[1].id && calls[0].id !== calls[1].id, JSON.stringify(calls));
});

test('parallel_tool_calls: on, the grammar of tool_choice takes calls in a row; off, one', async () => {
  const pick = [{ type: 'function', function: { name: 'pick_unit', parameters: { type: 'object', properties: { unit: { enum: ['c', 'f'] } }, required: ['unit'] } } }];
  eq((await raw('/props', { method: 'GET' })).json.eos_token, '</s>'); // id 2, banned below: the answer runs to max_tokens
  const body = { model: MODEL, messages: [{ role: 'user', content: 'Which unit?' }], tools: pick, max_tokens: 300, temperature: 0.8,
    ignore_eos: true, logit_bias: { 2: -100 } };
  // (auto's lazy grammar waits for the model to open a call, which this one need not: test_server checks it)
  for (const tool_choice of ['required', { type: 'function', function: { name: 'pick_unit' } }]) {
    const on = await client.chat.completions.create({ ...body, tool_choice, seed: 1, parallel_tool_calls: true });
    const n = on.choices[0].message.tool_calls?.length ?? 0;
    assert(n >= 2, `parallel on: ${n} calls: ${JSON.stringify(on.choices[0].message)}`);
    for (const t of on.choices[0].message.tool_calls) assert(['c', 'f'].includes(JSON.parse(t.function.arguments).unit), t.function.arguments);
    const def = await client.chat.completions.create({ ...body, tool_choice, seed: 1 });
    eq(def.choices[0].message.tool_calls?.length, n, 'the default is on (ChatML)');
    const off = await client.chat.completions.create({ ...body, tool_choice, seed: 1, parallel_tool_calls: false });
    eq(off.choices[0].message.tool_calls?.length, 1, JSON.stringify(off.choices[0].message));
  }
  const bad = await raw('/v1/chat/completions', { body: JSON.stringify({ ...body, tool_choice: 'required', parallel_tool_calls: 'yes' }) });
  eq(bad.status, 400);
  eq(bad.json.error.param, 'parallel_tool_calls');
});

test('content parts and a system message', async () => {
  const r = await client.chat.completions.create({ model: MODEL, max_tokens: 4, temperature: 0, messages: [
    { role: 'system', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: ' there' }] }] });
  assert(typeof r.choices[0].message.content === 'string');
});

test('prefix caching: a repeated prompt reports cached_tokens', async () => {
  const long = 'Once upon a time there was a little dog named Max who lived in a small house by the sea. ' +
    'Every morning Max ran to the beach to look for shells and to play with the waves.';
  const a = await client.completions.create({ model: MODEL, prompt: long, max_tokens: 4, temperature: 0 });
  const b = await client.completions.create({ model: MODEL, prompt: long + ' One day', max_tokens: 4, temperature: 0 });
  assert(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1,
    `cached ${b.usage.prompt_tokens_details.cached_tokens} of ${a.usage.prompt_tokens}`);
  // and the cached answer equals a cold one: the same prompt again gives the same text
  const c = await client.completions.create({ model: MODEL, prompt: long, max_tokens: 4, temperature: 0 });
  eq(c.choices[0].text, a.choices[0].text);
});

test('n > 1: choice i equals a single request with seed + i; usage sums the completions', async () => {
  const sp = { model: MODEL, prompt: 'The little bird', max_tokens: 12, temperature: 1.0, top_k: 0, top_p: 1, min_p: 0, ignore_eos: true };
  const r = await client.completions.create({ ...sp, n: 3, seed: 7 });
  eq(r.choices.map((c) => c.index), [0, 1, 2]);
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...sp, seed: 7 + i });
    eq(r.choices[i].text, one.choices[0].text, `choice ${i}`);
    eq(r.choices[i].finish_reason, 'length');
    if (i === 0) eq(r.usage.prompt_tokens, one.usage.prompt_tokens, 'the prompt counts once');
  }
  assert(new Set(r.choices.map((c) => c.text)).size > 1, 'the choices are all the same');
  eq(r.usage.completion_tokens, 36);
  eq(r.usage.total_tokens, r.usage.prompt_tokens + 36);
});

test('n > 1 streaming chat: chunks carry each index, same text as non-streaming', async () => {
  const q = { model: MODEL, messages, max_tokens: 16, temperature: 0.9, seed: 3, n: 2 };
  const ref = await client.chat.completions.create(q);
  eq(ref.choices.length, 2);
  const stream = await client.chat.completions.create({ ...q, stream: true, stream_options: { include_usage: true } });
  const text = ['', ''], finish = [null, null], role = [null, null];
  let usage = null;
  for await (const ch of stream) {
    if (ch.usage) { usage = ch.usage; continue; }
    for (const c of ch.choices) {
      if (c.delta.role) role[c.index] = c.delta.role;
      text[c.index] += c.delta.content ?? '';
      if (c.finish_reason) { assert(finish[c.index] === null, 'two finish chunks'); finish[c.index] = c.finish_reason; }
    }
  }
  eq(role, ['assistant', 'assistant']);
  eq(text, ref.choices.map((c) => c.message.content));
  eq(finish, ref.choices.map((c) => c.finish_reason));
  eq(usage.completion_tokens, ref.usage.completion_tokens);
});

test('n > 1 greedy: every choice is the greedy answer; n above --parallel is a 400', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, n: 4 });
  const one = await greedy('Once upon a time', 10);
  eq(r.choices.map((c) => c.text), [one, one, one, one]);
  const bad = await raw('/v1/completions', { body: JSON.stringify({ prompt: 'x', n: 64 }) });
  eq(bad.status, 400);
  eq(bad.json.error.param, 'n');
});

test('/tokenize and /detokenize round trip', async () => {
  const t = await raw('/tokenize', { body: JSON.stringify({ content: 'Hello world' }) });
  eq(t.status, 200);
  assert(t.json.tokens.length > 0);
  const d = await raw('/detokenize', { body: JSON.stringify({ tokens: t.json.tokens }) });
  eq(d.status, 200);
  assert(d.json.content.includes('Hello world'), d.json.content);
});

test('/metrics: Prometheus text', async () => {
  const m = await metrics();
  for (const k of ['brisk_requests_total', 'brisk_generated_tokens_total', 'brisk_queue_length', 'brisk_kv_cache_usage_ratio',
    'brisk_generation_tokens_per_second', 'brisk_prompt_tokens_cached_total'])
    assert(k in m, `missing ${k}`);
  assert(m.brisk_requests_total > 0);
});

await run();
