// concurrency.mjs — continuous batching: concurrent requests each equal their
// single-request greedy output; a client that disconnects frees its slot; a
// full queue answers 429 with Retry-After (BRISK_QUEUE_TEST=1: a server with
// --parallel 1 --queue 1).
import { client, test, run, assert, eq, raw, metrics, greedy, sleep, BASE, MODEL } from './lib.mjs';

const prompts = ['Once upon a time', 'The little bird', 'Tom and his mom went', 'A big red ball', 'The sun was',
  'Lily wanted to', 'One day, a frog', 'The old man'];

if (process.env.BRISK_QUEUE_TEST) {
  test('a full queue answers 429 with Retry-After, the others complete', async () => {
    const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 600, temperature: 0, ignore_eos: true });
    const rs = await Promise.all(Array.from({ length: 8 }, () => raw('/v1/completions', { body, headers: { Authorization: `Bearer ${process.env.BRISK_KEY}` } })));
    const codes = rs.map((r) => r.status);
    assert(codes.includes(429), `codes ${codes}`);
    assert(codes.includes(200), `codes ${codes}`);
    for (const r of rs) {
      if (r.status === 429) {
        eq(r.json.error.type, 'rate_limit_error');
        assert(r.headers.get('retry-after'), 'Retry-After');
      } else eq(r.status, 200);
    }
  });
  test('--api-key: 401 without the key, /health stays open', async () => {
    const r = await raw('/v1/models', { method: 'GET' });
    eq(r.status, 401);
    eq(r.json.error.type, 'authentication_error');
    eq((await raw('/health', { method: 'GET' })).status, 200);
    const ok = await raw('/v1/models', { method: 'GET', headers: { Authorization: `Bearer ${process.env.BRISK_KEY}` } });
    eq(ok.status, 200);
  });
} else {
  test('concurrent requests equal their single-request greedy output', async () => {
    const single = [];
    for (const p of prompts) single.push(await greedy(p, 48));
    const both = await Promise.all(prompts.map((p, i) => i % 2
      ? greedy(p, 48)
      : (async () => {
        const s = await client.completions.create({ model: MODEL, prompt: p, max_tokens: 48, temperature: 0, stream: true });
        let t = '';
        for await (const ch of s) t += ch.choices[0]?.text ?? '';
        return t;
      })()));
    for (let i = 0; i < prompts.length; i++) eq(both[i], single[i], `prompt ${i}`);
  });

  test('a stalled reader does not hold up other requests', async () => {
    const s = await client.completions.create({ model: MODEL, prompt: 'The little bird', max_tokens: 800, temperature: 0,
      ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    const it = s[Symbol.asyncIterator]();
    await it.next(); // then stop reading while the server keeps generating
    const t0 = Date.now();
    for (let i = 0; i < 3; i++) assert((await greedy(prompts[i], 16)).length > 0);
    const dt = Date.now() - t0;
    let usage = null, r;
    while (!(r = await it.next()).done) if (r.value.usage) usage = r.value.usage;
    eq(usage && usage.completion_tokens, 800, 'the stalled stream completes');
    assert(dt < 10000, `other requests took ${dt} ms`);
  });

  test('a client that disconnects mid-stream frees its slot', async () => {
    const before = await metrics();
    const ac = new AbortController();
    const res = await fetch(`${BASE}/v1/completions`, {
      method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1900, temperature: 0, ignore_eos: true, stream: true }),
    });
    const reader = res.body.getReader();
    await reader.read();
    ac.abort();
    let m;
    for (let i = 0; i < 50; i++) {
      await sleep(50);
      m = await metrics();
      if (m.brisk_slots_active === 0) break;
    }
    eq(m.brisk_slots_active, 0, 'slots active');
    assert(m.brisk_client_disconnects_total > before.brisk_client_disconnects_total, 'disconnect not counted');
    assert(m.brisk_generated_tokens_total - before.brisk_generated_tokens_total < 1900, 'generation ran to the end');
    assert((await greedy('Once upon a time', 5)).length > 0);
  });

  test('a non-streaming client that disconnects frees its slot', async () => {
    const ac = new AbortController();
    const p = fetch(`${BASE}/v1/completions`, {
      method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1900, temperature: 0, ignore_eos: true }),
    }).catch(() => null);
    await sleep(30);
    ac.abort();
    await p;
    let m;
    for (let i = 0; i < 50; i++) {
      await sleep(50);
      m = await metrics();
      if (m.brisk_slots_active === 0) break;
    }
    eq(m.brisk_slots_active, 0, 'slots active');
  });
}

await run();
