// qwen_xml.mjs — the tiny synthetic qwen3 served with the real Qwen3.5 chat template, whose tool
// calls are XML (<function=NAME>, <parameter=P>\nVALUE\n</parameter>): calls the model writes in that
// form come back parsed (values typed by the tools' schemas, $refs followed, Python's True/None and
// 'strings' read as JSON's, the parameters in any order), streamed as tool-call deltas, two in a row as two calls; a call opened
// inside the template's <think> ends the reasoning; tool_choice required / named forces the XML form.
// XML_CODER=1: the server runs our Qwen3-Coder-style template (no <think>), whose calls may come
// without their <tool_call> (and whose lazy grammar also starts at <function=NAME>).
import { client, test, run, assert, eq, MODEL } from './lib.mjs';

const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city', 'days'] } } }];
const lit = (s) => JSON.stringify(s);
const call = (city, days) => `<tool_call>\n<function=get_weather>\n<parameter=city>\n${city}\n</parameter>\n` +
  `<parameter=days>\n${days}\n</parameter>\n</function>\n</tool_call>`;
const base = { model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }], tools, max_tokens: 400,
  temperature: 0, chat_template_kwargs: { enable_thinking: false } };

// the answer's text forced by a grammar; the message, and the calls and text of the streamed answer
async function forced(text, extra = {}) {
  const body = { ...base, ...extra, grammar: `root ::= ${lit(text)}` };
  const r = await client.chat.completions.create(body);
  const s = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let content = '', reasoning = '';
  for await (const ch of s) {
    content += ch.choices[0]?.delta?.content ?? '';
    reasoning += ch.choices[0]?.delta?.reasoning_content ?? '';
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      if (!calls[d.index]) calls[d.index] = { name: d.function.name, args: '' };
      calls[d.index].args += d.function.arguments ?? '';
    }
  }
  return { msg: r.choices[0].message, finish: r.choices[0].finish_reason, calls, content, reasoning };
}
const parsed = (tc) => tc.map((t) => [t.function?.name ?? t.name, JSON.parse(t.function?.arguments ?? t.args)]);

if (process.env.XML_CODER) {
  test('Qwen3-Coder: a call without its <tool_call> is a call', async () => {
    const text = 'On it.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n' +
      '</parameter>\n</function>\n</tool_call>';
    const f = await forced(text);
    eq(f.finish, 'tool_calls');
    eq(parsed(f.msg.tool_calls), [['get_weather', { city: 'Paris', days: 3 }]]);
    eq(f.msg.content, 'On it.\n');
    eq(parsed(f.calls), [['get_weather', { city: 'Paris', days: 3 }]]);
    eq(f.content, 'On it.\n');
  });
  test('Qwen3-Coder: tool_choice auto takes the lazy grammar (<tool_call> and <function=NAME> start it)', async () => {
    const r = await client.chat.completions.create({ ...base, max_tokens: 16 });
    assert(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), JSON.stringify(r.choices[0]));
  });
  await run(); // exits: the Qwen3.5 tests below are not this template's
}

test('XML calls: parameters out of the schema order, Python literals for non-string values', async () => {
  const tools2 = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {
    city: { type: 'string' }, days: { type: ['integer', 'null'] }, metric: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string' } }, zip: { $ref: '#/$defs/Zip' } }, required: ['city'],
    $defs: { Zip: { type: 'string' } } } } }];
  const text = '<tool_call>\n<function=get_weather>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=days>\nNone\n' +
    '</parameter>\n<parameter=city>\nTrue\n</parameter>\n<parameter=tags>\n[\'a\', "b\'s", \'say "hi"\']\n</parameter>\n' +
    '<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>';
  const f = await forced(text, { tools: tools2 });
  const want = [['get_weather', { metric: true, days: null, city: 'True', tags: ['a', "b's", 'say "hi"'], zip: '75001' }]];
  eq(parsed(f.msg.tool_calls), want);
  eq(parsed(f.calls), want);
});

test('a <tool_call> inside the template\'s <think> ends the reasoning and is a call', async () => {
  const text = 'Paris first.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n' +
    '<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>';
  const f = await forced(text, { chat_template_kwargs: { enable_thinking: true } });
  eq(f.finish, 'tool_calls');
  eq(parsed(f.msg.tool_calls), [['get_weather', { city: 'Paris', days: 2 }]]);
  assert(f.msg.reasoning_content?.startsWith('Paris first.'), JSON.stringify(f.msg));
  assert(!f.msg.content, JSON.stringify(f.msg));
  eq(parsed(f.calls), [['get_weather', { city: 'Paris', days: 2 }]]);
  assert(f.reasoning.startsWith('Paris first.') && f.content === '', JSON.stringify(f));
});

test('XML tool calls parsed: two calls, typed values; streamed with distinct indexes', async () => {
  const body = { ...base, grammar: `root ::= ${lit(call('Paris', 3))} "\\n" ${lit(call('42', 7))}` };
  const want = [['get_weather', { city: 'Paris', days: 3 }], ['get_weather', { city: '42', days: 7 }]];
  const r = await client.chat.completions.create(body);
  const c = r.choices[0];
  eq(c.finish_reason, 'tool_calls');
  eq(c.message.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]), want);
  const s = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let content = '';
  for await (const ch of s) {
    content += ch.choices[0]?.delta?.content ?? '';
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      if (!calls[d.index]) calls[d.index] = { name: d.function.name, args: '' };
      calls[d.index].args += d.function.arguments ?? '';
    }
  }
  eq(content, '');
  eq(calls.map((t) => [t.name, JSON.parse(t.args)]), want);
});

test('tool_choice required and named: the grammar forces an XML call with typed values', async () => {
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await client.chat.completions.create({ ...base, tool_choice, parallel_tool_calls: false, max_tokens: 300,
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
        properties: { days: { type: 'integer' }, metric: { type: 'boolean' } }, required: ['days', 'metric'] } } }] });
    const tc = r.choices[0].message.tool_calls;
    assert(tc?.length === 1, JSON.stringify(r.choices[0]));
    eq(tc[0].function.name, 'get_weather');
    const a = JSON.parse(tc[0].function.arguments);
    assert(Number.isInteger(a.days) && typeof a.metric === 'boolean', tc[0].function.arguments);
  }
});

await run();
