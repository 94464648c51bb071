// errors.mjs — bad requests get clean 4xx answers in OpenAI's error shape,
// and the server keeps serving.
import { client, test, run, assert, eq, raw, greedy, MODEL } from './lib.mjs';

function isError(r, status, param) {
  eq(r.status, status, `status (${r.text.slice(0, 200)})`);
  assert(r.json && r.json.error && typeof r.json.error.message === 'string', `error shape: ${r.text.slice(0, 200)}`);
  assert('type' in r.json.error && 'param' in r.json.error && 'code' in r.json.error, 'error fields');
  if (param !== undefined) eq(r.json.error.param, param, 'param');
}

test('malformed JSON -> 400', async () => {
  isError(await raw('/v1/chat/completions', { body: '{"messages": [' }), 400);
  isError(await raw('/v1/completions', { body: 'not json at all' }), 400);
  isError(await raw('/v1/completions', { body: '[1, 2, 3]' }), 400);
});

test('wrong types -> 400 with the field', async () => {
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', temperature: 'hot' }) }), 400, 'temperature');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', max_tokens: 1.5 }) }), 400, 'max_tokens');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', stop: 7 }) }), 400, 'stop');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', stream: 'yes' }) }), 400, 'stream');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 42 }) }), 400, 'prompt');
  isError(await raw('/v1/chat/completions', { body: JSON.stringify({ messages: 'hello' }) }), 400, 'messages');
  isError(await raw('/v1/chat/completions', { body: JSON.stringify({ messages: [{ role: 'wizard', content: 'x' }] }) }), 400, 'messages');
  isError(await raw('/v1/chat/completions', { body: JSON.stringify({ model: 3, messages: [{ role: 'user', content: 'x' }] }) }), 400, 'model');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', temperature: 5 }) }), 400, 'temperature');
});

test('n above --parallel, or not a positive integer -> 400', async () => {
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', n: 100 }) }), 400, 'n');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', n: 0 }) }), 400, 'n');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'hi', n: 1.5 }) }), 400, 'n');
});

test('a bad response_format or grammar -> 400 (structured.mjs has more)', async () => {
  isError(await raw('/v1/chat/completions', { body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], response_format: { type: 'xml' } }) }), 400, 'response_format');
  isError(await raw('/v1/completions', { body: JSON.stringify({ prompt: 'x', grammar: 'root ::= (' }) }), 400, 'grammar');
});

test('huge body -> 413', async () => {
  const big = JSON.stringify({ prompt: 'a'.repeat(9 << 20) });
  isError(await raw('/v1/completions', { body: big }), 413);
});

test('prompt longer than the context -> 400 context_length_exceeded', async () => {
  const r = await raw('/v1/completions', { body: JSON.stringify({ prompt: 'the cat sat on the mat. '.repeat(2000), max_tokens: 4 }) });
  isError(r, 400, 'prompt');
  eq(r.json.error.code, 'context_length_exceeded');
  // through the client too: an APIError with status 400
  try {
    await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'word '.repeat(5000) }] });
    assert(false, 'no error');
  } catch (e) {
    eq(e.status, 400);
  }
});

test('unknown route -> 404, wrong method -> 405', async () => {
  isError(await raw('/v1/nothing', { method: 'GET' }), 404);
  isError(await raw('/v1/completions', { method: 'GET' }), 405);
});

test('the server still serves after all that', async () => {
  const t = await greedy('Once upon a time', 10);
  assert(t.length > 0);
});

await run();
