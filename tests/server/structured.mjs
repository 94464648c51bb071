// structured.mjs — structured output: response_format json_schema / json_object
// and GBNF `grammar` against a random-weight model. Whatever the weights, the
// output must parse as JSON and validate against the schema (a tiny validator
// for the keywords used here), streaming and not; bad schemas and grammars
// answer 400 with a message that says what is wrong.
import { client, test, run, assert, eq, raw, MODEL } from './lib.mjs';

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 6 },
    age: { type: 'integer' },
    mood: { enum: ['happy', 'sad', null] },
    tags: { type: 'array', items: { type: 'boolean' }, maxItems: 3 },
    pet: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/pet' }] },
  },
  required: ['name', 'age', 'mood', 'tags'],
  additionalProperties: false,
  $defs: { pet: { type: 'object', properties: { legs: { type: 'number' } }, required: ['legs'], additionalProperties: false } },
};
const response_format = { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } };
const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];

// Validates v against the subset of JSON schema used above; throws with a path.
function validate(v, s, path = '$') {
  if (s.$ref) return validate(v, schema.$defs[s.$ref.split('/').pop()], path);
  if (s.anyOf) {
    for (const alt of s.anyOf) { try { validate(v, alt, path); return; } catch { /* next */ } }
    throw new Error(`${path}: matches no anyOf branch: ${JSON.stringify(v)}`);
  }
  if (s.enum) { assert(s.enum.some((e) => e === v), `${path}: ${JSON.stringify(v)} not in enum`); return; }
  const t = v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
  if (s.type === 'integer') { assert(Number.isInteger(v), `${path}: not an integer: ${v}`); return; }
  assert(t === s.type, `${path}: ${t} is not ${s.type}`);
  if (t === 'string') {
    const n = [...v].length;
    assert(n >= (s.minLength ?? 0) && n <= (s.maxLength ?? Infinity), `${path}: length ${n}`);
  } else if (t === 'array') {
    assert(v.length <= (s.maxItems ?? Infinity), `${path}: ${v.length} items`);
    v.forEach((x, i) => validate(x, s.items, `${path}[${i}]`));
  } else if (t === 'object') {
    const keys = Object.keys(v), order = Object.keys(s.properties);
    for (const r of s.required || []) assert(keys.includes(r), `${path}: missing ${r}`);
    for (const k of keys) assert(order.includes(k), `${path}: extra key ${k}`);
    eq(keys, order.filter((k) => keys.includes(k)), `${path}: key order`);
    for (const k of keys) validate(v[k], s.properties[k], `${path}.${k}`);
  }
}

function check(text) {
  let v;
  try { v = JSON.parse(text); } catch (e) { throw new Error(`not JSON: ${JSON.stringify(text)}: ${e.message}`); }
  validate(v, schema);
  return v;
}

test('json_schema: the output parses and validates (greedy and sampled)', async () => {
  for (const [temperature, seed] of [[0, 1], [1, 2]]) {
    const r = await client.chat.completions.create({ model: MODEL, messages, response_format, max_tokens: 400, temperature, seed });
    eq(r.choices[0].finish_reason, 'stop', `finish (${r.choices[0].message.content})`);
    check(r.choices[0].message.content);
  }
});

test('json_schema, streaming: the joined deltas validate', async () => {
  const stream = await client.chat.completions.create({ model: MODEL, messages, response_format, max_tokens: 400, temperature: 1, seed: 4, stream: true });
  let text = '', finish = null;
  for await (const c of stream) {
    if (c.choices[0]?.delta?.content) text += c.choices[0].delta.content;
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
  }
  eq(finish, 'stop', `finish (${text})`);
  check(text);
});

test('json_object on /v1/completions: any JSON object', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 60, temperature: 0,
    response_format: { type: 'json_object' } });
  const text = r.choices[0].text;
  if (r.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(text);
    assert(v && typeof v === 'object' && !Array.isArray(v), text);
  } else assert(text.startsWith('{'), text); /* an unbounded object may run out of tokens */
});

test('grammar (GBNF): the output is a sentence of the grammar', async () => {
  const grammar = 'root ::= ("yes" | "no") " " [0-9]{1,3} "!"\n';
  for (const stream of [false, true]) {
    const r = await raw('/v1/completions', { body: JSON.stringify({ prompt: 'Once', max_tokens: 20, temperature: 1, seed: 5, grammar, stream }) });
    eq(r.status, 200, r.text.slice(0, 200));
    const text = stream
      ? r.text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)).choices[0]?.text || '').join('')
      : r.json.choices[0].text;
    assert(/^(yes|no) [0-9]{1,3}!$/.test(text), JSON.stringify(text));
  }
});

test('grammar with n = 2: every choice is a sentence (each has its own grammar state)', async () => {
  const grammar = 'root ::= ("yes" | "no") " " [0-9]{1,3} "!"\n';
  const r = await raw('/v1/completions', { body: JSON.stringify({ prompt: 'Once', max_tokens: 20, temperature: 1, seed: 9, grammar, n: 2 }) });
  eq(r.status, 200, r.text.slice(0, 200));
  eq(r.json.choices.length, 2);
  for (const c of r.json.choices) assert(/^(yes|no) [0-9]{1,3}!$/.test(c.text), JSON.stringify(c.text));
});

async function bad(body, param, msg) {
  const r = await raw('/v1/chat/completions', { body: JSON.stringify({ messages, ...body }) });
  eq(r.status, 400, r.text.slice(0, 200));
  eq(r.json.error.param, param, 'param');
  assert(r.json.error.message.includes(msg), `message: ${r.json.error.message}`);
}

test('bad schemas and grammars -> 400 with a clear message', async () => {
  const rf = (s) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: s } } });
  await bad(rf({ type: 'strin' }), 'response_format', "unknown type 'strin'");
  await bad(rf({ type: 'object', properties: { a: { type: 'string', pattern: '^a' } } }), 'response_format',
    "schema.properties.a: 'pattern' is not supported");
  await bad(rf({ $ref: '#/$defs/missing' }), 'response_format', 'points nowhere');
  await bad(rf({ type: 'object', properties: {}, required: ['a'] }), 'response_format', "required property 'a'");
  await bad({ response_format: { type: 'json_schema', json_schema: 'x' } }, 'response_format', 'must be an object');
  await bad({ response_format: { type: 'yaml' } }, 'response_format', 'text, json_object or json_schema');
  await bad({ grammar: 'root ::= "a" foo\n' }, 'grammar', "line 1, column 14: rule 'foo' is used but not defined");
  await bad({ grammar: 'root ::= [a-\n' }, 'grammar', 'line 1');
  await bad({ grammar: 'root ::= root "a"\n' }, 'grammar', 'left-recursive');
  await bad({ grammar: 42 }, 'grammar', 'must be a string');
  await bad({ grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, 'grammar', 'not both');
});

await run();
