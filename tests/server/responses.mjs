// responses.mjs — /v1/responses through the official `openai` client's
// client.responses.create: text output with usage, instructions rendered as
// the system message (the same prompt tokens as /v1/chat/completions gives),
// streaming events in order with consecutive sequence_numbers and the same
// text as the whole answer, a function_call (forced with brisk's `grammar`
// extension) and its function_call_output, previous_response_id continuing a
// conversation (store: false keeps nothing), reasoning items (with
// RESP_THINKING=1: a template that thinks), tool_choice (required, a named
// function, none) enforced by a grammar, and errors in OpenAI's shape.
import { test, run, assert, eq, raw, client, MODEL } from './lib.mjs';

const THINKING = process.env.RESP_THINKING === '1';
const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const chatTools = tools.map(({ name, description, parameters }) => ({ type: 'function', function: { name, description, parameters } }));
const CALL = 'root ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}\\n</tool_call>"';
const STORY = 'Tell me a story about a cat.';

// The events of a streamed request, checked for order and sequence numbers.
async function events(body) {
  const stream = await client.responses.create({ ...body, stream: true });
  const evs = [];
  for await (const ev of stream) evs.push(ev);
  evs.forEach((ev, i) => eq(ev.sequence_number, i, `sequence_number of ${ev.type}`));
  eq(evs[0].type, 'response.created');
  eq(evs[1].type, 'response.in_progress');
  eq(evs[0].response.status, 'in_progress');
  const last = evs[evs.length - 1];
  assert(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  return evs;
}

test('responses: a message with output_text and usage', async () => {
  const r = await client.responses.create({ model: MODEL, input: STORY, max_output_tokens: 16, temperature: 0 });
  eq(r.object, 'response');
  assert(r.id.startsWith('resp_'), r.id);
  assert(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') eq(r.incomplete_details.reason, 'max_output_tokens');
  eq(r.output[0].type, 'message');
  eq(r.output[0].role, 'assistant');
  eq(r.output[0].content[0].type, 'output_text');
  assert(r.output_text.length > 0, 'empty output_text');
  eq(r.output_text, r.output[0].content[0].text);
  assert(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, JSON.stringify(r.usage));
  eq(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  eq(r.max_output_tokens, 16);
  eq(r.model, MODEL);
});

test('instructions render as the system message (the prompt of chat/completions)', async () => {
  const r = await client.responses.create({ model: MODEL, instructions: 'Be brief.', input: [{ role: 'user', content: [{ type: 'input_text', text: STORY }] }], max_output_tokens: 2, temperature: 0 });
  eq(r.instructions, 'Be brief.');
  const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: STORY }], max_tokens: 2, temperature: 0 });
  eq(r.usage.input_tokens, c.usage.prompt_tokens);
  eq(r.output_text, c.choices[0].message.content);
  const dev = await client.responses.create({ model: MODEL, input: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: STORY }], max_output_tokens: 2, temperature: 0 });
  eq(dev.usage.input_tokens, c.usage.prompt_tokens);
});

test('streaming: events in order, text equal to the whole answer', async () => {
  const body = { model: MODEL, input: STORY, max_output_tokens: 24, temperature: 0 };
  const ref = await client.responses.create(body);
  const evs = await events(body);
  const types = evs.map((e) => e.type);
  const at = (t) => types.indexOf(t);
  assert(at('response.output_item.added') < at('response.content_part.added'), types.join());
  assert(at('response.content_part.added') < at('response.output_text.delta'), types.join());
  const tail = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done'];
  eq(types.slice(-4, -1), tail);
  const text = evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  eq(text, ref.output_text);
  eq(evs.find((e) => e.type === 'response.output_text.done').text, text);
  const fin = evs[evs.length - 1].response;
  eq(fin.status, ref.status);
  eq(fin.output, evs.filter((e) => e.type === 'response.output_item.done').map((e) => e.item));
  eq(fin.output[0].content[0].text, text);
  eq(fin.usage.output_tokens, ref.usage.output_tokens);
  // llama-server's timings ride on the last event (not on the non-streamed body)
  const t = evs[evs.length - 1].timings;
  assert(t && t.predicted_n === fin.usage.output_tokens && t.predicted_ms >= 0 && t.prompt_n + t.cache_n > 0, JSON.stringify(t));
  eq(ref.timings, undefined);
});

test('tools: a function_call item, its output answered (streaming and not)', async () => {
  const body = { model: MODEL, input: 'Weather in Paris?', tools, max_output_tokens: 200, temperature: 0, grammar: CALL };
  const r = await client.responses.create(body);
  eq(r.status, 'completed');
  const fc = r.output.find((o) => o.type === 'function_call');
  assert(fc, JSON.stringify(r.output));
  eq(fc.name, 'get_weather');
  eq(JSON.parse(fc.arguments), { city: 'Paris' });
  assert(fc.call_id.startsWith('call_') && fc.id.startsWith('fc_'), JSON.stringify(fc));
  eq(r.tools[0].name, 'get_weather');
  const evs = await events(body);
  const done = evs.find((e) => e.type === 'response.function_call_arguments.done');
  eq(JSON.parse(done.arguments), { city: 'Paris' });
  eq(evs.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join(''), done.arguments);
  eq(evs[evs.length - 1].type, 'response.completed');
  eq(evs[evs.length - 1].response.output.find((o) => o.type === 'function_call').name, 'get_weather');
  // the round trip: the call and its output as input items, then by previous_response_id
  const out = { type: 'function_call_output', call_id: fc.call_id, output: 'sunny, 21 C' };
  const input = [{ role: 'user', content: 'Weather in Paris?' }, ...r.output, out];
  const r2 = await client.responses.create({ model: MODEL, input, tools, max_output_tokens: 4, temperature: 0, store: false });
  const chat = await client.chat.completions.create({ model: MODEL, tools: chatTools, max_tokens: 4, temperature: 0, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: fc.call_id, type: 'function', function: { name: 'get_weather', arguments: fc.arguments } }] },
    { role: 'tool', tool_call_id: fc.call_id, content: 'sunny, 21 C' }] });
  eq(r2.usage.input_tokens, chat.usage.prompt_tokens);
  eq(r2.output_text, chat.choices[0].message.content ?? '');
  const r3 = await client.responses.create({ model: MODEL, previous_response_id: r.id, input: [out], tools, max_output_tokens: 4, temperature: 0 });
  eq(r3.previous_response_id, r.id);
  eq(r3.usage.input_tokens, r2.usage.input_tokens);
  eq(r3.output_text, r2.output_text);
});

test('previous_response_id continues a conversation; store: false keeps nothing', async () => {
  const r1 = await client.responses.create({ model: MODEL, instructions: 'Be brief.', input: STORY, max_output_tokens: 8, temperature: 0 });
  const r2 = await client.responses.create({ model: MODEL, previous_response_id: r1.id, input: 'And then?', max_output_tokens: 8, temperature: 0 });
  // the same as sending the whole conversation (instructions are not carried over)
  const whole = await client.responses.create({ model: MODEL, store: false, max_output_tokens: 8, temperature: 0,
    input: [{ role: 'user', content: STORY }, ...r1.output, { role: 'user', content: 'And then?' }] });
  eq(r2.usage.input_tokens, whole.usage.input_tokens);
  eq(r2.output_text, whole.output_text);
  assert(r2.usage.input_tokens > r1.usage.input_tokens, `${r2.usage.input_tokens} vs ${r1.usage.input_tokens}`);
  // a chain of three, streamed
  const evs = await events({ model: MODEL, previous_response_id: r2.id, input: 'The end.', max_output_tokens: 4, temperature: 0 });
  assert(evs[evs.length - 1].response.usage.input_tokens > r2.usage.input_tokens, 'the chain lost turns');
  eq(whole.store, false);
  try {
    await client.responses.create({ model: MODEL, previous_response_id: whole.id, input: 'x', max_output_tokens: 2 });
    assert(false, 'no error');
  } catch (e) {
    eq(e.status, 400);
    eq(e.code, 'previous_response_not_found');
    eq(e.param, 'previous_response_id');
  }
});

if (THINKING) test('reasoning: the thinking comes as a reasoning item before the message', async () => {
  const body = { model: MODEL, input: STORY, max_output_tokens: 40, temperature: 0, reasoning: { summary: 'auto' },
    grammar: 'root ::= "<think>\\nhmm\\n</think>\\n\\nA cat." ' };
  const r = await client.responses.create(body);
  eq(r.output.map((o) => o.type), ['reasoning', 'message']);
  eq(r.output[0].content[0].type, 'reasoning_text');
  eq(r.output[0].content[0].text.trim(), 'hmm');
  eq(r.output[0].summary[0].text.trim(), 'hmm');
  eq(r.output_text, 'A cat.');
  const evs = await events(body);
  eq(evs.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => e.delta).join('').trim(), 'hmm');
  const shape = (out) => out.map(({ id, ...rest }) => rest);
  eq(shape(evs[evs.length - 1].response.output), shape(r.output));
  // reasoning items go back in as input
  const r2 = await client.responses.create({ model: MODEL, previous_response_id: r.id, input: 'Go on.', max_output_tokens: 2 });
  assert(r2.usage.input_tokens > r.usage.input_tokens, 'no history');
});

// Codex's custom (freeform) tools: offered as a function of one string, "input"; their calls are
// custom_tool_call items, streamed as custom_tool_call_input events, and go back as input items
test('custom tools: a custom_tool_call item, its input streamed, its output answered', async () => {
  const custom = [{ type: 'custom', name: 'apply_patch', description: 'Edit files',
    format: { type: 'grammar', syntax: 'lark', definition: 'start: "*** Begin Patch" /(.|\\n)*/' } }];
  const PATCH = 'root ::= "<tool_call>\\n{\\"name\\": \\"apply_patch\\", \\"arguments\\": {\\"input\\": \\"*** Begin Patch\\\\n\\"}}\\n</tool_call>"';
  const body = { model: MODEL, input: 'Fix it.', tools: custom, max_output_tokens: 200, temperature: 0, grammar: PATCH };
  const r = await client.responses.create(body);
  eq(r.status, 'completed');
  const ct = r.output.find((o) => o.type === 'custom_tool_call');
  assert(ct, JSON.stringify(r.output));
  eq(ct.name, 'apply_patch');
  eq(ct.input, '*** Begin Patch\n');
  assert(ct.call_id.startsWith('call_') && ct.id.startsWith('ctc_') && !('arguments' in ct), JSON.stringify(ct));
  const evs = await events(body);
  const done = evs.find((e) => e.type === 'response.custom_tool_call_input.done');
  eq(done.input, ct.input);
  eq(evs.filter((e) => e.type === 'response.custom_tool_call_input.delta').map((e) => e.delta).join(''), ct.input);
  eq(evs.find((e) => e.type === 'response.output_item.done').item.type, 'custom_tool_call');
  // the prompt offers it as a function of one string argument, with the grammar in its description
  const chatCustom = [{ type: 'function', function: { name: 'apply_patch', description: `Edit files\n\nIts input follows this lark grammar:\n${custom[0].format.definition}`,
    parameters: { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] } } }];
  const out = { type: 'custom_tool_call_output', call_id: ct.call_id, output: 'Done!' };
  const r2 = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'Fix it.' }, ct, out], tools: custom, max_output_tokens: 4, temperature: 0, store: false });
  const chat = await client.chat.completions.create({ model: MODEL, tools: chatCustom, max_tokens: 4, temperature: 0, messages: [
    { role: 'user', content: 'Fix it.' },
    { role: 'assistant', content: '', tool_calls: [{ id: ct.call_id, type: 'function', function: { name: 'apply_patch', arguments: JSON.stringify({ input: ct.input }) } }] },
    { role: 'tool', tool_call_id: ct.call_id, content: 'Done!' }] });
  eq(r2.usage.input_tokens, chat.usage.prompt_tokens);
  const r3 = await client.responses.create({ model: MODEL, previous_response_id: r.id, input: [out], tools: custom, max_output_tokens: 4, temperature: 0 });
  eq(r3.usage.input_tokens, r2.usage.input_tokens);
  // tool_choice {type: custom}: a call is forced; a text format is accepted too
  const f = await client.responses.create({ model: MODEL, input: 'Fix it.', max_output_tokens: 300, temperature: 0.8, seed: 1,
    tools: [{ type: 'custom', name: 'note', format: { type: 'text' } }, ...custom], tool_choice: { type: 'custom', name: 'note' },
    parallel_tool_calls: false });
  // (the random-weight qwen3 of RESP_THINKING=1 may ramble inside the string past max_output_tokens)
  if (!THINKING || f.status === 'completed') {
    eq(f.status, 'completed');
    eq(f.output.filter((o) => o.type === 'custom_tool_call').map((o) => o.name), ['note']);
  }
  const bad = await raw('/v1/responses', { body: JSON.stringify({ model: MODEL, input: 'x', tools: [{ type: 'custom', name: 'n', format: { type: 'grammar', syntax: 'ebnf', definition: 'x' } }] }) });
  eq(bad.status, 400);
  eq(bad.json.error.param, 'tools');
});

// tool_choice: a grammar forces one call in the template's syntax
const pick = [
  { type: 'function', name: 'pick_unit', parameters: { type: 'object', properties: { unit: { enum: ['c', 'f'] } }, required: ['unit'] } },
  { type: 'function', name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'] } },
];
const calls = (r) => r.output.filter((o) => o.type === 'function_call');

test('tool_choice: required and a named function force a call; none gives none', async () => {
  const body = { model: MODEL, input: 'Which unit?', tools: pick, max_output_tokens: 250, temperature: 0.8, parallel_tool_calls: false };
  for (let i = 0; i < 3; i++) {
    const r = await client.responses.create({ ...body, tool_choice: 'required' });
    eq(r.status, 'completed');
    eq(calls(r).length, 1, JSON.stringify(r.output));
    const fc = calls(r)[0], args = JSON.parse(fc.arguments);
    assert(fc.name === 'pick_unit' ? ['c', 'f'].includes(args.unit) : ['utc', 'cet'].includes(args.zone), fc.arguments);
  }
  for (const name of ['pick_unit', 'get_time']) {
    const r = await client.responses.create({ ...body, tool_choice: { type: 'function', name } });
    eq(calls(r).map((c) => c.name), [name]);
    const evs = await events({ ...body, tool_choice: { type: 'function', name } });
    eq(evs.find((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call').item.name, name);
  }
  // chat/completions: the same enforcement
  const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Time?' }], max_tokens: 250,
    tools: pick.map(({ name, parameters }) => ({ type: 'function', function: { name, parameters } })),
    tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false });
  eq(c.choices[0].finish_reason, 'tool_calls');
  eq(c.choices[0].message.tool_calls.map((t) => t.function.name), ['get_time']);
  // none: the tools leave the prompt and nothing is parsed as a call
  const none = await client.responses.create({ ...body, tools, tool_choice: 'none', grammar: CALL });
  eq(calls(none).length, 0);
  assert(none.output_text.includes('get_weather'), none.output_text);
  const bad = async (extra, msg) => {
    const r = await raw('/v1/responses', { body: JSON.stringify({ ...body, ...extra }) });
    eq(r.status, 400, msg);
    eq(r.json.error.param, 'tool_choice', msg);
  };
  await bad({ tool_choice: { type: 'function', name: 'nope' } }, 'unknown name');
  // auto: the lazy grammar of a schema it cannot express (pattern) leaves the answer free; a forced call is a 400
  const odd = [{ type: 'function', name: 'grep', parameters: { type: 'object', properties: { re: { type: 'string', pattern: '^a+$' } } } }];
  eq((await raw('/v1/responses', { body: JSON.stringify({ ...body, tools: odd, max_output_tokens: 4 }) })).status, 200);
  await bad({ tools: odd, tool_choice: 'required' }, 'a schema the grammar cannot express');
  await bad({ tools: [], tool_choice: 'required' }, 'no tools');
  await bad({ tool_choice: 'required', grammar: CALL }, 'with a grammar');
});

// parallel_tool_calls: two <tool_call> blocks are two function_call items (streamed: an item each);
// the Response repeats the field (its default: on, the templates here render every call)
test('parallel tool calls: two function_call items, streamed as two items', async () => {
  const call = (city) => `"<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"${city}\\"}}\\n</tool_call>"`;
  const body = { model: MODEL, input: 'Weather in Paris and Rome?', tools, max_output_tokens: 400, temperature: 0,
    grammar: `root ::= ${call('Paris')} "\\n" ${call('Rome')}` };
  const r = await client.responses.create(body);
  eq(r.status, 'completed');
  eq(r.parallel_tool_calls, true);
  eq(calls(r).map((c) => [c.name, JSON.parse(c.arguments)]), [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
  assert(calls(r)[0].call_id !== calls(r)[1].call_id && calls(r)[0].id !== calls(r)[1].id, JSON.stringify(calls(r)));
  const evs = await events(body);
  const done = evs.filter((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call');
  eq(done.map((e) => [e.item.name, JSON.parse(e.item.arguments)]), [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
  assert(done[0].output_index !== done[1].output_index, 'output_index');
  eq(evs[evs.length - 1].response.output.filter((o) => o.type === 'function_call').length, 2);
  const off = await client.responses.create({ ...body, parallel_tool_calls: false });
  eq(off.parallel_tool_calls, false);
});

// Codex's tool list: hosted tools (web_search) and namespaces of functions
test('agents: hosted tools are not offered, the functions of a namespace are, their calls name it', async () => {
  const body = { model: MODEL, input: 'Which unit?', max_output_tokens: 250, store: false,
    tools: [{ type: 'web_search', external_web_access: false }, { type: 'namespace', name: 'units', description: 'Units',
      tools: [pick[0], { type: 'web_search' }] }, pick[1]],
    tool_choice: { type: 'function', name: 'pick_unit' }, include: ['reasoning.encrypted_content'],
    prompt_cache_key: 'k', client_metadata: { a: 'b' }, parallel_tool_calls: true, reasoning: { summary: 'auto' } };
  const r = await client.responses.create(body); // parallel_tool_calls: one call or several, each of the name
  assert(calls(r).length >= 1, JSON.stringify(r.output));
  for (const c of calls(r)) eq([c.name, c.namespace], ['pick_unit', 'units']);
  eq(r.parallel_tool_calls, true);
  const evs = await events(body);
  eq(evs.find((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call').item.namespace, 'units');
  const t = await client.responses.create({ ...body, tool_choice: { type: 'function', name: 'get_time' }, parallel_tool_calls: false });
  eq(calls(t).map((c) => [c.name, c.namespace]), [['get_time', undefined]]);
  eq(t.parallel_tool_calls, false);
  const hosted = await raw('/v1/responses', { body: JSON.stringify({ ...body, tools: [{ type: 'web_search' }], tool_choice: 'auto', max_output_tokens: 2 }) });
  eq(hosted.status, 200);
  // a prompt longer than the context: OpenAI's code, param input
  const long = await raw('/v1/responses', { body: JSON.stringify({ model: MODEL, input: 'word '.repeat(5000) }) });
  eq([long.status, long.json.error.code, long.json.error.param], [400, 'context_length_exceeded', 'input']);
});

test('errors: OpenAI shape; unknown model 404, bad input, tools and fields 400', async () => {
  try {
    await client.responses.create({ model: 'gpt-nope', input: 'hi' });
    assert(false, 'no error');
  } catch (e) {
    eq(e.status, 404);
    eq(e.type, 'invalid_request_error');
    eq(e.param, 'model');
  }
  const bad = async (body, param) => {
    const r = await raw('/v1/responses', { body: JSON.stringify({ model: MODEL, ...body }) });
    eq(r.status, 400, JSON.stringify(body));
    eq(r.json.error.type, 'invalid_request_error');
    eq(r.json.error.param, param);
  };
  await bad({ input: 42 }, 'input');
  await bad({ input: [] }, 'input');
  await bad({ input: [{ type: 'item_reference', id: 'x' }] }, 'input');
  await bad({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }, 'input');
  await bad({ input: 'hi', tools: [{ type: 'namespace', name: 'ns' }] }, 'tools');
  await bad({ input: 'hi', tools: [{ name: 'typeless' }] }, 'tools');
  await bad({ input: 'hi', max_output_tokens: 0 }, 'max_output_tokens');
  await bad({ input: 'hi', instructions: 7 }, 'instructions');
  await bad({ input: 'hi', previous_response_id: 'resp_nope' }, 'previous_response_id');
  const r = await raw('/v1/responses', { body: JSON.stringify({ input: 'hi' }) });
  eq(r.status, 400);
  eq(r.json.error.param, 'model');
  eq((await raw('/v1/responses', { method: 'GET' })).status, 405);
});

await run();
