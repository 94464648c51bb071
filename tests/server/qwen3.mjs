// qwen3.mjs — a tiny synthetic qwen3 (random weights, Qwen's BPE vocabulary)
// served with the real Qwen3 chat template: the template's thinking switch and
// tools reach the prompt, special tokens tokenize as one id, chat and
// streaming work end to end.
import { client, test, run, assert, eq, raw, MODEL } from './lib.mjs';

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

await run();
