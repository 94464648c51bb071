// native.mjs — llama-server's own /completion API (what llama.cpp's scripts, bench tools and
// front-ends that predate the OpenAI routes speak): its result shape, streaming without [DONE],
// n_probs, stop words, mixed token/text prompts, logit_bias pairs, samplers, response_fields,
// n_cmpl; settings brisk lacks refused by name; /infill refused where the model has no FIM tokens.
// Compared with /v1/completions' greedy answers.
import { test, run, assert, eq, raw, greedy } from './lib.mjs';

const PROMPT = 'Once upon a time';
const post = (path, body) => raw(path, { body: JSON.stringify(body) });

// The SSE events of a streamed /completion: each `data: {...}` parsed.
async function events(body) {
  const r = await post('/completion', { ...body, stream: true });
  eq(r.status, 200, r.text);
  assert(!r.text.includes('[DONE]'), 'llama-server ends a native stream with stop: true, not [DONE]');
  return r.text.split('\n\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
}

test('/completion: llama-server result shape; greedy content equals /v1/completions', async () => {
  const want = await greedy(PROMPT, 24);
  const r = await post('/completion', { prompt: PROMPT, n_predict: 24, temperature: 0, return_tokens: true });
  eq(r.status, 200, r.text);
  const o = r.json;
  eq(o.content, want, 'content');
  for (const k of ['index', 'content', 'tokens', 'id_slot', 'stop', 'model', 'tokens_predicted', 'tokens_evaluated',
    'generation_settings', 'prompt', 'has_new_line', 'truncated', 'stop_type', 'stopping_word', 'tokens_cached', 'timings'])
    assert(k in o, `no ${k} in ${r.text}`);
  eq([o.stop, o.stop_type, o.stopping_word, o.truncated], [true, 'limit', '', false]);
  eq(o.tokens.length, 24);
  eq(o.tokens_predicted, 24);
  assert(o.id_slot >= 0 && o.tokens_evaluated > 0 && o.prompt.includes(PROMPT), r.text);
  eq([o.generation_settings.n_predict, o.generation_settings.temperature], [24, 0]);
  eq(o.generation_settings.top_p, 0.95); // the float as it reads
  assert(o.timings.predicted_n === 24 && o.timings.prompt_n + o.timings.cache_n === o.tokens_evaluated, JSON.stringify(o.timings));
  // without return_tokens, llama-server leaves tokens empty
  const q = await post('/completion', { prompt: PROMPT, n_predict: 4, temperature: 0 });
  eq(q.json.tokens, []);
  // /completions without /v1 is llama-server's native route too; /v1/completions stays OpenAI's
  const c = await post('/completions', { prompt: PROMPT, n_predict: 4, temperature: 0 });
  eq(c.json.content, q.json.content);
  const v1 = await post('/v1/completions', { prompt: PROMPT, max_tokens: 4, temperature: 0 });
  eq(v1.json.choices[0].text, q.json.content);
});

test('streaming: data events joined equal the whole answer; the last has stop: true and the settings', async () => {
  const whole = await post('/completion', { prompt: PROMPT, n_predict: 30, temperature: 0 });
  const ev = await events({ prompt: PROMPT, n_predict: 30, temperature: 0 });
  const last = ev[ev.length - 1];
  eq(ev.slice(0, -1).every((e) => e.stop === false), true, 'partial events have stop: false');
  eq(ev.slice(0, -1).map((e) => e.content).join(''), whole.json.content);
  eq(ev.slice(0, -1).reduce((n, e) => n + e.tokens.length, 0), 30, 'each partial event carries its token ids');
  eq([last.stop, last.stop_type, last.tokens_predicted, last.content], [true, 'limit', 30, '']);
  assert(last.generation_settings && last.timings, JSON.stringify(last));
});

test('stop words: stop_type word, stopping_word, the text cut before it', async () => {
  const full = (await post('/completion', { prompt: PROMPT, n_predict: 40, temperature: 0 })).json.content;
  const word = full.split(' ').filter((w) => w.length > 3)[2];
  const r = (await post('/completion', { prompt: PROMPT, n_predict: 40, temperature: 0, stop: [word, 'zzqx'] })).json;
  eq([r.stop_type, r.stopping_word], ['word', word]);
  eq(r.content, full.slice(0, full.indexOf(word)));
  const s = await events({ prompt: PROMPT, n_predict: 40, temperature: 0, stop: [word] });
  eq(s.slice(0, -1).map((e) => e.content).join(''), r.content);
  eq(s[s.length - 1].stopping_word, word);
});

test('n_probs: completion_probabilities with ids, bytes and top entries; the greedy token is the top one', async () => {
  const r = (await post('/completion', { prompt: PROMPT, n_predict: 8, temperature: 0, n_probs: 3, return_tokens: true })).json;
  eq(r.completion_probabilities.length, 8);
  r.completion_probabilities.forEach((p, i) => {
    eq(p.id, r.tokens[i]);
    eq(p.top_logprobs.length, 3);
    eq(p.top_logprobs[0].id, p.id, 'greedy = top');
    assert(p.top_logprobs[0].logprob >= p.top_logprobs[1].logprob && p.top_logprobs[1].logprob >= p.top_logprobs[2].logprob);
    eq(Buffer.from(p.bytes).toString('utf8'), p.token);
  });
  const ev = await events({ prompt: PROMPT, n_predict: 8, temperature: 0, n_probs: 2 });
  eq(ev.slice(0, -1).reduce((n, e) => n + e.completion_probabilities.length, 0), 8, 'streamed per token');
  eq((await post('/completion', { prompt: PROMPT, n_probs: 21 })).status, 400);
});

test('prompts: token ids, ids and text mixed, [text], {prompt_string} all equal the text prompt', async () => {
  const tok = (await post('/tokenize', { content: PROMPT, add_special: true })).json.tokens;
  const want = (await post('/completion', { prompt: PROMPT, n_predict: 12, temperature: 0 })).json.content;
  const words = PROMPT.split(' ');
  const head = (await post('/tokenize', { content: words.slice(0, 2).join(' '), add_special: true })).json.tokens;
  for (const prompt of [tok, [PROMPT], { prompt_string: PROMPT }, [...head, ' ' + words.slice(2).join(' ')]]) {
    const r = await post('/completion', { prompt, n_predict: 12, temperature: 0 });
    eq(r.status, 200, r.text);
    eq(r.json.content, want, `prompt ${JSON.stringify(prompt)}`);
  }
  const many = await post('/completion', { prompt: ['a', 'b'], n_predict: 2 });
  eq([many.status, many.json.error.param], [400, 'prompt']);
});

test('logit_bias as pairs: false bans a token, a text biases its tokens; the object form too', async () => {
  const r = (await post('/completion', { prompt: PROMPT, n_predict: 6, temperature: 0, return_tokens: true })).json;
  const first = r.tokens[0];
  for (const logit_bias of [[[first, false]], { [first]: -100 }]) {
    const b = (await post('/completion', { prompt: PROMPT, n_predict: 6, temperature: 0, return_tokens: true, logit_bias })).json;
    assert(!b.tokens.includes(first), `banned ${first} came out: ${JSON.stringify(b.tokens)}`);
  }
  const piece = (await post('/detokenize', { tokens: [first] })).json.content;
  const t = (await post('/completion', { prompt: PROMPT, n_predict: 6, temperature: 0, return_tokens: true,
    logit_bias: [[piece, -100]] })).json;
  assert(t.tokens[0] !== first, 'a text bias reaches its token');
  eq((await post('/completion', { prompt: PROMPT, logit_bias: [[1]] })).status, 400);
});

test('sampling: seeds replay, samplers turn brisk\'s others off, unsupported settings refused by name', async () => {
  const a = (await post('/completion', { prompt: PROMPT, n_predict: 16, temperature: 1.2, seed: 7 })).json;
  const b = (await post('/completion', { prompt: PROMPT, n_predict: 16, temperature: 1.2, seed: 7 })).json;
  eq(a.content, b.content, 'same seed, same text');
  eq(a.generation_settings.seed, 7);
  const rnd = (await post('/completion', { prompt: PROMPT, n_predict: 16, temperature: 1.2 })).json;
  const again = (await post('/completion', { prompt: PROMPT, n_predict: 16, temperature: 1.2,
    seed: rnd.generation_settings.seed })).json;
  eq(again.content, rnd.content, 'a random seed reported in generation_settings replays');
  const s = (await post('/completion', { prompt: PROMPT, n_predict: 2, samplers: ['top_k', 'temperature'] })).json;
  eq([s.generation_settings.top_p, s.generation_settings.min_p, s.generation_settings.samplers], [1, 0, ['top_k', 'temperature']]);
  const hot = (await post('/completion', { prompt: PROMPT, n_predict: 2, temperature: 3.5, repeat_last_n: -1 })).json;
  eq([hot.generation_settings.temperature, hot.generation_settings.repeat_last_n > 64], [3.5, true]);
  // at their off values llama.cpp's other samplers are accepted; on, refused with the field named
  const off = await post('/completion', { prompt: PROMPT, n_predict: 2, typical_p: 1, mirostat: 0, dry_multiplier: 0,
    xtc_probability: 0, top_n_sigma: -1, cache_prompt: true, id_slot: -1 });
  eq(off.status, 200, off.text);
  for (const [k, v] of [['typical_p', 0.9], ['mirostat', 2], ['dry_multiplier', 0.8], ['xtc_probability', 0.5],
    ['top_n_sigma', 1.5], ['post_sampling_probs', true]]) {
    const r = await post('/completion', { prompt: PROMPT, n_predict: 2, [k]: v });
    eq([r.status, r.json.error.param], [400, k], r.text);
  }
  eq((await post('/completion', { prompt: PROMPT, samplers: ['warp'] })).status, 400);
});

test('/tokenize as llama-server: parse_special, and pieces that are not UTF-8 as byte lists', async () => {
  const on = (await post('/tokenize', { content: '<s>Once' })).json.tokens;
  const off = (await post('/tokenize', { content: '<s>Once', parse_special: false })).json.tokens;
  eq(on[0], 1, '<s> is BOS when parsed');
  assert(off.length > on.length && !off.includes(1), `parse_special false: ${JSON.stringify(off)}`);
  // llama-server's README example, on this very model (stories260K): 'á' falls back to two byte tokens
  // (after SentencePiece's space prefix)
  eq((await post('/tokenize', { content: 'á', with_pieces: true })).json.tokens.map((t) => t.piece).slice(-2), [[195], [161]]);
  eq((await post('/tokenize', { content: 'Once', with_pieces: true })).json.tokens.map((t) => typeof t.piece), ['string']);
});

test('/infill on a model without fill-in-the-middle tokens: a 400 that says so', async () => {
  const r = await post('/infill', { input_prefix: 'a', input_suffix: 'b' });
  eq(r.status, 400);
  assert(/fill-in-the-middle/.test(r.json.error.message), r.text);
});

test('n_cmpl: an array of results; response_fields picks (and unnests) fields', async () => {
  const r = (await post('/completion', { prompt: PROMPT, n_predict: 5, temperature: 0, n_cmpl: 2 })).json;
  assert(Array.isArray(r) && r.length === 2, JSON.stringify(r));
  eq(r.map((x) => x.index), [0, 1]);
  eq(r[0].content, r[1].content, 'greedy choices agree');
  const f = (await post('/completion', { prompt: PROMPT, n_predict: 5, temperature: 0,
    response_fields: ['content', 'generation_settings/n_predict', 'nope'] })).json;
  eq(Object.keys(f).sort(), ['content', 'generation_settings/n_predict']);
  eq(f['generation_settings/n_predict'], 5);
  eq(f.content, r[0].content);
});

await run();
