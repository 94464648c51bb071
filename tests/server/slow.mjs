// slow.mjs — slow clients cannot starve the server (issue 33): SLOW_CONNS
// sockets (2,000 by default), spread over loopback addresses 127.0.0.2... so
// that each stays under --max-conns-per-ip, send a request line and then a
// header line every second, never finishing. Meanwhile /health and a short
// completion from 127.0.0.1 must answer within 1 s; one address past its cap
// is refused at once; and every dribbling socket is closed by the server's
// request deadline (--timeout, SLOW_TIMEOUT s) although it never went idle.
// BRISK_URL's server runs with --timeout SLOW_TIMEOUT --max-conns-per-ip SLOW_PER_IP.
import net from 'node:net';
import { client, test, run, assert, eq, metrics, sleep, BASE, MODEL } from './lib.mjs';

const N = Number(process.env.SLOW_CONNS || 2000);
const PER_IP = Number(process.env.SLOW_PER_IP || 150);
const TIMEOUT = Number(process.env.SLOW_TIMEOUT || 5);
const { hostname, port } = new URL(BASE);
const PER_ADDR = PER_IP - 10;

// Opens one dribbling socket from localAddress; resolves once connected (or refused).
function slow(localAddress, state) {
  return new Promise((resolve) => {
    const s = net.connect({ host: hostname, port: Number(port), localAddress });
    const c = { s, closed: false, t_closed: 0, timer: null };
    s.on('connect', () => {
      s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n');
      c.timer = setInterval(() => { if (!c.closed) s.write('X-Slow: 1\r\n'); }, 1000);
      resolve(c);
    });
    const end = () => {
      if (c.closed) return;
      c.closed = true;
      c.t_closed = Date.now();
      clearInterval(c.timer);
      state.closed++;
      resolve(c);
    };
    s.on('error', end);
    s.on('close', end);
    s.on('data', () => {}); // an error answer, if any, before the close
  });
}

async function timed(fn) {
  const t0 = Date.now();
  await fn();
  return Date.now() - t0;
}

const state = { closed: 0 };
let conns = [];
let t_open = 0;

test(`${N} slow connections over ${Math.ceil(N / PER_ADDR)} addresses are all accepted`, async () => {
  t_open = Date.now();
  const pending = [];
  for (let i = 0; i < N; i++) {
    const addr = `127.0.0.${2 + Math.floor(i / PER_ADDR)}`;
    pending.push(slow(addr, state));
    if (pending.length % 200 === 0) await Promise.all(pending.slice(-200));
  }
  conns = await Promise.all(pending);
  await sleep(300);
  eq(state.closed, 0, 'slow sockets closed before their deadline');
  const m = await metrics();
  assert(m.brisk_http_connections >= N, `server holds ${m.brisk_http_connections} connections`);
});

test('/health and a completion answer within 1 s while they dribble', async () => {
  for (let k = 0; k < 3; k++) {
    const ms = await timed(async () => eq((await fetch(`${BASE}/health`)).status, 200));
    assert(ms < 1000, `/health took ${ms} ms`);
    const cm = await timed(async () => {
      const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
      assert(r.choices[0].text.length > 0);
    });
    assert(cm < 1000, `a completion took ${cm} ms`);
    await sleep(300);
  }
});

test('an address past --max-conns-per-ip is refused at once; others still served', async () => {
  const st = { closed: 0 };
  const extra = await Promise.all(Array.from({ length: 20 }, () => slow('127.0.0.2', st)));
  await sleep(300);
  assert(st.closed >= 20 - (PER_IP - PER_ADDR), `only ${st.closed} of 20 over the cap were refused`);
  eq((await fetch(`${BASE}/health`)).status, 200);
  for (const c of extra) { clearInterval(c.timer); c.s.destroy(); }
});

test(`the request deadline (${TIMEOUT} s) closes every dribbling socket`, async () => {
  const deadline = t_open + (TIMEOUT + 2) * 1000;
  while (state.closed < N && Date.now() < deadline + 2000) await sleep(100);
  eq(state.closed, N, 'sockets closed by the deadline');
  const late = conns.filter((c) => c.t_closed - t_open > (TIMEOUT + 3) * 1000).length;
  eq(late, 0, 'sockets closed well after the deadline');
  const m = await metrics();
  assert(m.brisk_deadline_closes_total >= N, `deadline_closes_total ${m.brisk_deadline_closes_total}`);
  eq((await fetch(`${BASE}/health`)).status, 200);
});

await run();
