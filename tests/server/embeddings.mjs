// embeddings.mjs — /v1/embeddings through the official openai client and /v1/rerank over
// fetch, against `brisk embed` (the engine's vectors, normalised as the server does) on the
// same model. EMB_MODE says what the server was started with: "mean" (--embeddings --pooling
// mean: embeddings, cosine rerank), "none" (--pooling none: late-interaction rerank) or
// "rank" (--reranking on a reranker: the head's score). EMB_BIN: the brisk binary;
// EMB_MODEL: the served file.
import { execFileSync } from 'node:child_process';
import { client, MODEL, test, run, assert, eq, raw } from './lib.mjs';

const MODE = process.env.EMB_MODE || 'mean';
const BIN = process.env.EMB_BIN, FILE = process.env.EMB_MODEL;
const TEXTS = ['In the beginning God created the heaven and the earth.', 'And God said, Let there be light.'];
const QUERY = 'Who created the earth?';

// `brisk embed`'s vectors of texts (L2-normalised), pooled as the server pools them
function engine(texts, pooling) {
  const out = execFileSync(BIN, ['embed', '-m', FILE, '--pooling', pooling, '-t', '1', ...texts], { encoding: 'utf8' });
  return JSON.parse(out);
}
const maxdiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);

if (MODE === 'mean') {
  test('embeddings: a string, strings, base64; equal to the engine\'s', async () => {
    const want = engine(TEXTS, 'mean');
    const one = await client.embeddings.create({ model: MODEL, input: TEXTS[0], encoding_format: 'float' });
    eq(one.object, 'list');
    eq(one.data.length, 1);
    assert(maxdiff(one.data[0].embedding, want[0]) < 1e-6, 'one string differs from brisk embed');
    assert(one.usage.prompt_tokens > 0 && one.usage.total_tokens === one.usage.prompt_tokens, 'usage');
    const two = await client.embeddings.create({ model: MODEL, input: TEXTS, encoding_format: 'float' });
    eq(two.data.map((d) => d.index), [0, 1]);
    // inputs batched in one step: the kernels sum in another order for another row count (see
    // test_embeddings' batched case), so 1e-3 where one input alone is bitwise brisk embed's
    for (let i = 0; i < 2; i++) assert(maxdiff(two.data[i].embedding, want[i]) < 1e-3, `input ${i} differs`);
    // the client's default asks for base64 and decodes it into floats
    const b64 = await client.embeddings.create({ model: MODEL, input: TEXTS });
    for (let i = 0; i < 2; i++) assert(maxdiff(b64.data[i].embedding, two.data[i].embedding) < 1e-6, `base64 input ${i} differs`);
    const n = Math.hypot(...two.data[0].embedding);
    assert(Math.abs(n - 1) < 1e-5, `not L2-normalised: ${n}`);
  });
  test('embeddings: token arrays; many inputs batched over the slots', async () => {
    const ids = (await raw('/tokenize', { body: JSON.stringify({ content: TEXTS[1], add_special: true }) })).json.tokens;
    const want = engine([TEXTS[1]], 'mean')[0];
    const r = await client.embeddings.create({ model: MODEL, input: [ids, ids], encoding_format: 'float' });
    eq(r.data.length, 2);
    assert(maxdiff(r.data[1].embedding, want) < 1e-3, 'token input differs');
    const one = await client.embeddings.create({ model: MODEL, input: ids, encoding_format: 'float' });
    assert(maxdiff(one.data[0].embedding, want) < 1e-6, 'one token input differs');
    // more inputs than slots, and more tokens in all than one slot's context (-c 256)
    const many = Array.from({ length: 14 }, (_, i) => `${TEXTS[i % 2]} ${TEXTS[(i + 1) % 2]} ${i}`);
    const all = await client.embeddings.create({ model: MODEL, input: many, encoding_format: 'float' });
    const solo = engine(many, 'mean');
    for (let i = 0; i < many.length; i++)
      assert(maxdiff(all.data[i].embedding, solo[i]) < 1e-3, `batched input ${i} differs (${maxdiff(all.data[i].embedding, solo[i])})`);
  });
  test('embeddings: bad input is a 400 with a JSON error; generation is refused', async () => {
    for (const body of [{}, { input: [] }, { input: [[1, -1]] }, { input: [''] }, { input: 5 },
      { input: 'x', encoding_format: 'int8' }, { input: 'x', model: 'nope' }, { input: [[0.5]] }]) {
      const r = await raw('/v1/embeddings', { body: JSON.stringify(body) });
      assert(r.status === 400 || r.status === 404, `${JSON.stringify(body)}: ${r.status} ${r.text}`);
      assert(r.json && r.json.error && r.json.error.message, 'no error message');
    }
    // an input must fit one step (the server runs with --batch 64)
    const long = await raw('/v1/embeddings', { body: JSON.stringify({ input: ['short', 'word '.repeat(200)] }) });
    eq(long.status, 400);
    eq(long.json.error.code, 'context_length_exceeded');
    const g = await raw('/v1/chat/completions', { body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }) });
    eq(g.status, 501);
  });
  test('rerank: cosine of pooled vectors, top_n, return_documents', async () => {
    const [q, ...docs] = engine([QUERY, ...TEXTS], 'mean');
    const r = await raw('/v1/rerank', { body: JSON.stringify({ query: QUERY, documents: TEXTS, top_n: 1, return_documents: true }) });
    eq(r.status, 200);
    eq(r.json.results.length, 1);
    const s = docs.map((d) => dot(q, d)), best = s[0] >= s[1] ? 0 : 1;
    eq(r.json.results[0].index, best);
    assert(Math.abs(r.json.results[0].relevance_score - s[best]) < 1e-5, 'cosine differs');
    eq(r.json.results[0].document.text, TEXTS[best]);
    const bad = await raw('/v1/rerank', { body: JSON.stringify({ query: QUERY, documents: [] }) });
    eq(bad.status, 400);
  });
}

if (MODE === 'none') {
  test('rerank: late interaction (MaxSim over normalised token vectors)', async () => {
    const [q, ...docs] = engine([QUERY, ...TEXTS], 'none');
    const maxsim = (d) => q.reduce((s, qv) => s + Math.max(...d.map((dv) => dot(qv, dv))), 0);
    const want = docs.map(maxsim);
    const r = await raw('/v1/rerank', { body: JSON.stringify({ query: QUERY, documents: TEXTS }) });
    eq(r.status, 200);
    eq(r.json.results.length, 2);
    assert(r.json.results[0].relevance_score >= r.json.results[1].relevance_score, 'not sorted');
    for (const x of r.json.results)
      assert(Math.abs(x.relevance_score - want[x.index]) < 1e-4, `doc ${x.index}: ${x.relevance_score} vs ${want[x.index]}`);
    const e = await raw('/v1/embeddings', { body: JSON.stringify({ input: 'x' }) });
    eq(e.status, 400); // pooling none has no OpenAI shape
  });
}

if (MODE === 'rank') {
  test('rerank: the classification head\'s score of the rendered rerank template', async () => {
    const prompts = TEXTS.map((d) => `Query: ${QUERY}\nDocument: ${d}`);
    const want = execFileSync(BIN, ['embed', '-m', FILE, '--pooling', 'rank', '--embd-normalize', '-1', '-t', '1', ...prompts],
      { encoding: 'utf8' });
    const scores = JSON.parse(want).map((v) => v[0]);
    const r = await raw('/v1/rerank', { body: JSON.stringify({ query: QUERY, documents: TEXTS, model: MODEL }) });
    eq(r.status, 200);
    for (const x of r.json.results) {
      assert(x.relevance_score > 0 && x.relevance_score < 1, 'a probability');
      assert(Math.abs(x.relevance_score - scores[x.index]) < 1e-5, `doc ${x.index}: ${x.relevance_score} vs ${scores[x.index]}`);
    }
    const e = await raw('/v1/embeddings', { body: JSON.stringify({ input: 'x' }) });
    eq(e.status, 400);
  });
}

await run();
