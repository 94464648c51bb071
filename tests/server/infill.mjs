// infill.mjs — llama-server's /infill (code completion as llama.vim and llama.vscode ask for it) on a
// model with the Qwen3 tokenizer's fill-in-the-middle tokens: the repository-level FIM layout of
// llama-server's format_prompt_infill, code whose text spells a special token kept as text, the
// prefix and suffix cut to the batch, the /completion result and stream, and bad requests.
// BRISK_URL's server runs a Qwen3-tokenizer model with -c 1024 (batch 512: prefix 384, suffix 128).
import { test, run, assert, eq, raw } from './lib.mjs';

const post = (path, body) => raw(path, { body: JSON.stringify(body) });
const base = { input_prefix: 'def add(a, b):\n    ', input_suffix: '\n\nprint(add(1, 2))\n', n_predict: 4, temperature: 0 };

test('the layout: repo name, a file per extra chunk, the current file, then prefix, prompt, suffix, middle', async () => {
  const r = await post('/infill', { ...base, prompt: 'return', input_extra: [{ filename: 'util.py', text: 'X = 1\n' }, { text: 'Y = 2\n' }] });
  eq(r.status, 200, r.text);
  eq(r.json.prompt, '<|repo_name|>myproject\n<|file_sep|>util.py\nX = 1\n<|file_sep|>tmp\nY = 2\n<|file_sep|>filename\n' +
    '<|fim_prefix|>def add(a, b):\n    return<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>');
  eq([r.json.stop, r.json.tokens_predicted], [true, 4]);
  const bare = await post('/infill', base);
  eq(bare.json.prompt, '<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>');
});

test('code that spells a special token stays text; the prompt\'s own markup is parsed', async () => {
  const plain = await post('/infill', { ...base, input_prefix: 's = "ab"\n' });
  const fim = await post('/infill', { ...base, input_prefix: 's = "a<|fim_middle|>b"\n' });
  assert(fim.json.tokens_evaluated - plain.json.tokens_evaluated > 1,
    `'<|fim_middle|>' in code took ${fim.json.tokens_evaluated - plain.json.tokens_evaluated} token(s)`);
  const p = await post('/infill', { ...base, prompt: '<|fim_pad|>' });
  eq(p.json.tokens_evaluated - (await post('/infill', base)).json.tokens_evaluated, 1);
});

test('a long prefix keeps its end, a long suffix its start (3/4 and 1/4 of the batch)', async () => {
  const lines = Array.from({ length: 400 }, (_, i) => `x${i} = ${i}\n`);
  const r = await post('/infill', { ...base, input_prefix: lines.join(''), input_suffix: lines.join('') });
  eq(r.status, 200, r.text);
  const pre = r.json.prompt.split('<|fim_prefix|>')[1].split('<|fim_suffix|>')[0];
  const suf = r.json.prompt.split('<|fim_suffix|>')[1].split('<|fim_middle|>')[0];
  assert(pre.endsWith('x399 = 399\n') && !pre.includes('x0 = 0\n'), 'the prefix keeps its end');
  assert(suf.startsWith('x0 = 0\n') && !suf.includes('x399 = 399'), 'the suffix keeps its start');
  assert(r.json.tokens_evaluated <= 512 + 20, `${r.json.tokens_evaluated} prompt tokens`);
});

test('streaming and the /completion settings work on /infill', async () => {
  const whole = (await post('/infill', { ...base, n_predict: 8, return_tokens: true })).json;
  const r = await post('/infill', { ...base, n_predict: 8, stream: true });
  const ev = r.text.split('\n\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
  eq(ev.slice(0, -1).map((e) => e.content).join(''), whole.content);
  eq(ev[ev.length - 1].stop, true);
  eq(whole.tokens.length, whole.tokens_predicted);
});

test('bad requests: a missing prefix or suffix, bad extra chunks, a non-string prompt', async () => {
  for (const [body, param] of [[{ input_suffix: 'x' }, 'input_prefix'], [{ input_prefix: 'x' }, 'input_suffix'],
    [{ ...base, input_extra: 'nope' }, 'input_extra'], [{ ...base, input_extra: [{ filename: 'a' }] }, 'input_extra'],
    [{ ...base, prompt: [1, 2] }, 'prompt']]) {
    const r = await post('/infill', body);
    eq([r.status, r.json.error.param], [400, param], r.text);
  }
});

await run();
