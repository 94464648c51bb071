// anthropic.mjs — /v1/messages and /v1/messages/count_tokens through the
// official @anthropic-ai/sdk client (make deps): text, system, streaming
// events equal to the non-streaming answer, tool_use output (forced with
// brisk's `grammar` extension) and tool_result input, thinking blocks (with
// ANTH_THINKING=1: a template that thinks), count_tokens, and errors in
// Anthropic's shape.
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test, run, assert, eq, raw, BASE, MODEL } from './lib.mjs';

const npm = resolve(process.env.BRISK_NPM || '.deps/npm/node_modules');
const { default: Anthropic } = await import(pathToFileURL(join(npm, '@anthropic-ai/sdk/index.mjs')).href);
const anthropic = new Anthropic({ baseURL: BASE, apiKey: process.env.BRISK_KEY || 'none', maxRetries: 0 });
const THINKING = process.env.ANTH_THINKING === '1';

const user = [{ role: 'user', content: 'Tell me a story about a cat.' }];
const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const CALL = 'root ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}\\n</tool_call>"';

test('messages: a text answer with usage', async () => {
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 16, messages: user, system: 'Be brief.', temperature: 0 });
  eq(m.type, 'message');
  eq(m.role, 'assistant');
  assert(m.id.startsWith('msg_'), m.id);
  eq(m.content[0].type, 'text');
  assert(m.content[0].text.length > 0, 'empty text');
  assert(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  assert(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, JSON.stringify(m.usage));
});

test('messages: max_tokens gives stop_reason max_tokens and the exact count', async () => {
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], temperature: 0, stop_sequences: ['zzzz'] });
  if (m.stop_reason === 'max_tokens') eq(m.usage.output_tokens, 5);
});

test('streaming: events in order, text equal to the non-streaming answer', async () => {
  const ref = await anthropic.messages.create({ model: MODEL, max_tokens: 24, messages: user, temperature: 0 });
  const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 24, messages: user, temperature: 0 });
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const fin = await stream.finalMessage();
  eq(types[0], 'message_start');
  eq(types[types.length - 1], 'message_stop');
  eq(types[types.length - 2], 'message_delta');
  eq(fin.content.map((b) => b.text ?? '').join(''), ref.content.map((b) => b.text ?? '').join(''));
  eq(fin.stop_reason, ref.stop_reason);
  eq(fin.usage.output_tokens, ref.usage.output_tokens);
});

test('tools: a tool_use block with parsed input (streaming and not)', async () => {
  const body = { model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, temperature: 0, grammar: CALL };
  const m = await anthropic.messages.create(body);
  eq(m.stop_reason, 'tool_use');
  const tu = m.content.find((b) => b.type === 'tool_use');
  assert(tu, JSON.stringify(m.content));
  eq(tu.name, 'get_weather');
  eq(tu.input, { city: 'Paris' });
  assert(tu.id.startsWith('toolu_'), tu.id);
  const fin = await anthropic.messages.stream(body).finalMessage();
  eq(fin.stop_reason, 'tool_use');
  eq(fin.content.find((b) => b.type === 'tool_use').input, { city: 'Paris' });
});

test('tool_choice any and tool force a call (a grammar in the template syntax)', async () => {
  const pick = [{ name: 'pick_unit', input_schema: { type: 'object', properties: { unit: { enum: ['c', 'f'] } }, required: ['unit'] } },
    { name: 'get_time', input_schema: { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'] } }];
  const body = { model: MODEL, max_tokens: 250, messages: [{ role: 'user', content: 'Which unit?' }], tools: pick, temperature: 0.8 };
  const any = await anthropic.messages.create({ ...body, tool_choice: { type: 'any', disable_parallel_tool_use: true } });
  eq(any.stop_reason, 'tool_use');
  assert(['pick_unit', 'get_time'].includes(any.content.find((b) => b.type === 'tool_use').name), JSON.stringify(any.content));
  const one = await anthropic.messages.create({ ...body, tool_choice: { type: 'tool', name: 'get_time', disable_parallel_tool_use: true } });
  eq(one.content.filter((b) => b.type === 'tool_use').map((b) => b.name), ['get_time']);
  assert(['utc', 'cet'].includes(one.content.find((b) => b.type === 'tool_use').input.zone), JSON.stringify(one.content));
});

// parallel tool use: two <tool_call> blocks are two tool_use blocks (streamed: a block each);
// disable_parallel_tool_use holds a forced call to one
test('parallel tool use: two tool_use blocks, streamed as two blocks; disable_parallel_tool_use', async () => {
  const call = (city) => `"<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"${city}\\"}}\\n</tool_call>"`;
  const body = { model: MODEL, max_tokens: 400, messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }], tools, temperature: 0,
    grammar: `root ::= ${call('Paris')} "\\n" ${call('Rome')}` };
  const m = await anthropic.messages.create(body);
  eq(m.stop_reason, 'tool_use');
  const uses = m.content.filter((b) => b.type === 'tool_use');
  eq(uses.map((b) => [b.name, b.input]), [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
  assert(uses[0].id !== uses[1].id, 'ids');
  const starts = [];
  const stream = anthropic.messages.stream(body);
  stream.on('streamEvent', (ev) => { if (ev.type === 'content_block_start' && ev.content_block.type === 'tool_use') starts.push(ev.index); });
  const fin = await stream.finalMessage();
  eq(starts.length, 2);
  assert(starts[0] !== starts[1], JSON.stringify(starts));
  eq(fin.content.filter((b) => b.type === 'tool_use').map((b) => b.input), [{ city: 'Paris' }, { city: 'Rome' }]);
  // a forced call with the end of text ignored (greedy): calls follow each other to max_tokens, or one when disabled
  const pick = [{ name: 'pick_unit', input_schema: { type: 'object', properties: { unit: { enum: ['c', 'f'] } }, required: ['unit'] } }];
  const forced = { model: MODEL, max_tokens: 300, messages: [{ role: 'user', content: 'Which unit?' }], tools: pick, temperature: 0, ignore_eos: true };
  const count = async (tool_choice) => (await anthropic.messages.create({ ...forced, tool_choice })).content.filter((b) => b.type === 'tool_use').length;
  const n = await count({ type: 'any', disable_parallel_tool_use: false });
  assert(n >= 2, `parallel: ${n} tool_use blocks`);
  eq(await count({ type: 'any' }), n, 'the default: parallel');
  eq(await count({ type: 'any', disable_parallel_tool_use: true }), 1);
  eq(await count({ type: 'tool', name: 'pick_unit', disable_parallel_tool_use: true }), 1);
  const bad = await raw('/v1/messages', { body: JSON.stringify({ ...body, tool_choice: { type: 'auto', disable_parallel_tool_use: 'yes' } }) });
  eq(bad.status, 400);
});

test('tool_result and tool_use in the history render and answer', async () => {
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny, 21 C' }, { type: 'text', text: 'Thanks!' }] },
  ];
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 8, messages, tools, temperature: 0 });
  eq(m.type, 'message');
  const n = await anthropic.messages.countTokens({ model: MODEL, messages, tools });
  const bare = await anthropic.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  assert(n.input_tokens > bare.input_tokens + 5, `${n.input_tokens} vs ${bare.input_tokens}`);
  eq(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), n.input_tokens);
});

if (THINKING) test('thinking: enabled gives a thinking block before the text', async () => {
  const body = { model: MODEL, max_tokens: 40, messages: user, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 },
    grammar: 'root ::= "<think>\\nhmm\\n</think>\\n\\nA cat." ' };
  const m = await anthropic.messages.create(body);
  eq(m.content[0].type, 'thinking');
  eq(m.content[0].thinking.trim(), 'hmm');
  eq(m.content[1].type, 'text');
  eq(m.content[1].text, 'A cat.');
  const fin = await anthropic.messages.stream(body).finalMessage();
  eq(fin.content.map((b) => b.type), ['thinking', 'text']);
  eq(fin.content[1].text, 'A cat.');
});

// Claude Code's request: system messages among the messages, adaptive thinking
// shown or omitted, server tools and deferred tools, fields brisk does not use
test('agents: a Claude Code shaped request streams a turn; too long a prompt in Anthropic\'s words', async () => {
  const body = { model: MODEL, max_tokens: 8, stream: true,
    system: [{ type: 'text', text: 'x-billing: 1' }, { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] },
      { role: 'system', content: [{ type: 'text', text: '# Environment', cache_control: { type: 'ephemeral' } }] }],
    tools: [...tools, { name: 'Later', input_schema: { type: 'object', properties: {} }, defer_loading: true },
      { type: 'web_search_20250305', name: 'web_search' }],
    thinking: { type: 'adaptive', display: 'omitted' }, context_management: { edits: [] }, output_config: { effort: 'high' },
    metadata: { user_id: 'u' } };
  for (const display of ['omitted', 'summarized']) {
    const r = await raw('/v1/messages?beta=true', { body: JSON.stringify({ ...body, thinking: { type: 'adaptive', display } }),
      headers: { 'anthropic-beta': 'claude-code-20250219', 'anthropic-version': '2023-06-01' } });
    eq(r.status, 200, display);
    assert(r.text.includes('event: message_stop'), r.text);
    if (display === 'omitted') assert(!r.text.includes('thinking_delta'), 'thinking text shown');
  }
  // a system message among the messages joins the system prompt: the same prompt as one system text
  const count = async (b) => (await raw('/v1/messages/count_tokens', { body: JSON.stringify({ model: MODEL, ...b }) })).json.input_tokens;
  const hi = { role: 'user', content: 'Hi' };
  eq(await count({ system: 'A', messages: [hi, { role: 'system', content: [{ type: 'text', text: 'B' }] }] }),
    await count({ system: 'A\n\nB', messages: [hi] }));
  const bad = await raw('/v1/messages', { body: JSON.stringify({ ...body, stream: false, thinking: { type: 'sometimes' } }) });
  eq([bad.status, bad.json.error.type], [400, 'invalid_request_error']);
  const long = await raw('/v1/messages', { body: JSON.stringify({ ...body, messages: [{ role: 'user', content: 'word '.repeat(5000) }] }) });
  eq(long.status, 400);
  assert(/^prompt is too long: \d+ tokens > \d+ maximum$/.test(long.json.error.message), long.json.error.message);
});

test('errors: Anthropic shape; unknown model 404, missing max_tokens 400', async () => {
  try {
    await anthropic.messages.create({ model: 'claude-nope', max_tokens: 4, messages: user });
    assert(false, 'no error');
  } catch (e) {
    eq(e.status, 404);
    eq(e.error?.type, 'error');
    eq(e.error?.error?.type, 'not_found_error');
  }
  const r = await raw('/v1/messages', { body: JSON.stringify({ model: MODEL, messages: user }) });
  eq(r.status, 400);
  eq(r.json.type, 'error');
  eq(r.json.error.type, 'invalid_request_error');
  const img = await raw('/v1/messages', { body: JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }) });
  eq(img.status, 400);
});

await run();
