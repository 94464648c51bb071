// qwen3.mjs — a tiny synthetic qwen3 (random weights, Qwen's BPE vocabulary)
// served with the real Qwen3 chat template: the template's thinking switch and
// tools reach the prompt, special tokens tokenize as one id, chat and
// streaming work end to end.
import { client, test, run, assert, eq, raw, BASE, MODEL } from './lib.mjs';

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const user = [{ role: 'user', content: 'Hi' }];

test('the Qwen3 template: generation prompt, thinking off, tools', async () => {
  const on = await raw('/apply-template', { body: JSON.stringify({ messages: user }) });
  eq(on.json.prompt, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  const off = await raw('/apply-template', { body: JSON.stringify({ messages: user, chat_template_kwargs: { enable_thinking: false } }) });
  eq(off.json.prompt, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
  const t = await raw('/apply-template', { body: JSON.stringify({ messages: user, tools }) });
  assert(t.json.prompt.startsWith('<|im_start|>system\n# Tools'), t.json.prompt.slice(0, 80));
  assert(t.json.prompt.includes('"name": "get_weather"'), 'tool JSON');
  const none = await raw('/apply-template', { body: JSON.stringify({ messages: user, tools, tool_choice: 'none' }) });
  eq(none.json.prompt, on.json.prompt);
});

test('assistant tool calls and tool results render', async () => {
  const r = await raw('/apply-template', { body: JSON.stringify({ tools, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '21 C' }] }) });
  eq(r.status, 200);
  assert(r.json.prompt.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'), r.json.prompt);
  assert(r.json.prompt.includes('<tool_response>\n21 C\n</tool_response>'), 'tool response');
});

test('special tokens are single ids; usage counts the rendered prompt', async () => {
  const p = (await raw('/apply-template', { body: JSON.stringify({ messages: user }) })).json.prompt;
  const tk = await raw('/tokenize', { body: JSON.stringify({ content: p, with_pieces: true }) });
  eq(tk.json.tokens[0].piece, '<|im_start|>');
  const r = await client.chat.completions.create({ model: MODEL, messages: user, max_tokens: 4, temperature: 0 });
  eq(r.usage.prompt_tokens, tk.json.tokens.length);
});

test('chat and streaming with tools through the template', async () => {
  const ref = await client.chat.completions.create({ model: MODEL, messages: user, tools, max_tokens: 12, temperature: 0 });
  assert(['stop', 'length', 'tool_calls'].includes(ref.choices[0].finish_reason));
  const s = await client.chat.completions.create({ model: MODEL, messages: user, tools, max_tokens: 12, temperature: 0, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
  eq(text, ref.choices[0].message.content ?? '');
});

// Qwen's byte-level vocabulary splits CJK characters over tokens: a token's
// text alone is not UTF-8. Every answer must still be strict UTF-8 JSON, with
// such tokens as "bytes:\\x.." and their raw bytes in `bytes` (issue 33).
async function strictJSON(path, body) {
  const res = await fetch(`${BASE}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const buf = new Uint8Array(await res.arrayBuffer());
  const text = new TextDecoder('utf-8', { fatal: true }).decode(buf); // throws on invalid UTF-8
  return JSON.parse(text);
}

test('logprobs on a Chinese prompt: strict UTF-8, partial tokens as bytes', async () => {
  const messages = [{ role: 'user', content: '请用中文讲一个关于猫的故事，越长越好。' }];
  let partial = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const r = await strictJSON('/v1/chat/completions', { model: MODEL, messages, max_tokens: 40, temperature: 1.5, seed,
      logprobs: true, top_logprobs: 5, chat_template_kwargs: { enable_thinking: false } });
    for (const t of r.choices[0].logprobs.content) {
      assert(Array.isArray(t.bytes), 'no bytes');
      const valid = (() => { try { new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(t.bytes)); return true; } catch { return false; } })();
      if (!valid) { partial++; assert(t.token.startsWith('bytes:'), `partial token text '${t.token}'`); }
      else eq(t.token, Buffer.from(t.bytes).toString('utf8'), 'token text');
      for (const top of t.top_logprobs) assert(Array.isArray(top.bytes), 'top without bytes');
    }
    const c = await strictJSON('/v1/completions', { model: MODEL, prompt: '中文故事：', max_tokens: 20, temperature: 1.5, seed, logprobs: 5 });
    eq(c.choices[0].logprobs.tokens.length, c.usage.completion_tokens);
  }
  assert(partial > 0, 'no partial-UTF-8 token was generated: the test proves nothing');
  const tk = await strictJSON('/tokenize', { content: '猫的故事', with_pieces: true });
  assert(tk.tokens.length > 0);
});

await run();
