// chat.mjs — the web chat page (GET /) in headless Chromium, driven by
// playwright-core: the API-key prompt, streaming, safe markdown, the thinking
// block, error lines and Stop, against a running `brisk serve --api-key`.
// BRISK_URL, BRISK_KEY, BRISK_NPM as for tests/server; CHROMIUM is the browser
// binary; SHOTS the folder for the screenshots.
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { client, test, run, assert, eq, metrics, sleep, BASE } from '../server/lib.mjs';

const npm = resolve(process.env.BRISK_NPM || '.deps/npm/node_modules');
const { chromium } = await import(pathToFileURL(join(npm, 'playwright-core/index.mjs')).href);
const KEY = process.env.BRISK_KEY;
const SHOTS = process.env.SHOTS || 'build';

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = await (await browser.newContext({ viewport: { width: 900, height: 800 } })).newPage();
const problems = [];  // page errors and console errors (a CSP violation is one), not the 4xx the tests ask for
page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
page.on('console', (m) => {
  if (m.type() === 'error' && !/^Failed to load resource: .* status of 4\d\d/.test(m.text())) problems.push(`console: ${m.text()}`);
});
page.on('request', (r) => { if (!r.url().startsWith(BASE) && !r.url().startsWith('data:')) problems.push(`request: ${r.url()}`); });
const model = (await client.models.list()).data[0].id;

const lastReply = () => page.locator('#log .msg.assistant').last();
// Types text and sends it with Enter; waits until the reply is complete.
async function ask(text) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => document.getElementById('stop').disabled, null, { timeout: 15000 });
}
async function setField(id, value) {
  if ((await page.locator('#settings').getAttribute('open')) === null) await page.click('#settings summary');
  await page.fill(`#${id}`, String(value));
  await page.dispatchEvent(`#${id}`, 'change');
}
// A canned SSE answer of /v1/chat/completions: one chunk per piece.
function sse(pieces) {
  const chunk = (delta, finish = null) => `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 0,
    model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  return chunk({ role: 'assistant', content: '' }) + pieces.map((p) => chunk(p)).join('') + chunk({}, 'stop') + 'data: [DONE]\n\n';
}

test('GET / is the page: HTML, revalidated by ETag, no key needed, locked down by CSP', async () => {
  const r = await fetch(`${BASE}/`);
  eq(r.status, 200);
  assert(r.headers.get('content-type').startsWith('text/html'), r.headers.get('content-type'));
  eq(r.headers.get('cache-control'), 'no-cache');
  assert(/default-src 'none'/.test(r.headers.get('content-security-policy')), 'CSP');
  const html = await r.text();
  assert(html.startsWith('<!doctype html>') && html.includes('</html>'), 'whole page');
  assert(!/(src|href)=["']?(https?:)?\/\//i.test(html), 'no network resources');
  eq((await fetch(`${BASE}/`, { headers: { 'If-None-Match': r.headers.get('etag') } })).status, 304);
  eq((await fetch(`${BASE}/v1/models`)).status, 401);
});

test('a 401 asks for the API key, which is kept in localStorage', async () => {
  await page.goto(`${BASE}/`);
  await page.waitForSelector('#keyform:not([hidden])');
  assert((await page.textContent('#error')).includes('API key'), 'the error line says why');
  await page.fill('#key', KEY);
  await page.click('#keyform button');
  await page.waitForFunction((m) => document.getElementById('model').textContent === m, model);
  eq(await page.evaluate(() => localStorage.getItem('brisk.key')), KEY);
  assert(await page.isHidden('#error'), 'the error line went away');
  await page.reload();
  await page.waitForFunction((m) => document.getElementById('model').textContent === m, model);
  assert(await page.isHidden('#keyform'), 'no key prompt once the key is kept');
});

test('Shift+Enter adds a line; Enter sends; tokens stream into the page', async () => {
  await setField('temperature', 0);
  await setField('max_tokens', 200);
  // the whole max_tokens, so the answer takes many frames (stories260K may end early)
  await page.route('**/v1/chat/completions', (route) =>
    route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), ignore_eos: true }) }));
  await page.evaluate(() => {  // every length the reply goes through
    window.lens = new Set();
    new MutationObserver(() => {
      const b = [...document.querySelectorAll('#log .msg.assistant .body')].pop();
      if (b) window.lens.add(b.textContent.length);
    }).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
  });
  // The reply's bytes arrive at 16 KB/s (Chromium's network emulation): stories260K on the CPU writes
  // its 200 tokens in a few ms, which one read of the stream could take whole, and then the page has
  // nothing to show in parts however well it streams (this case failed so on a fast, idle machine).
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions',
    { offline: false, latency: 0, downloadThroughput: 16384, uploadThroughput: -1 });
  await page.fill('#input', 'Once upon a time');
  await page.press('#input', 'Shift+Enter');
  await page.type('#input', 'there was');
  eq(await page.inputValue('#input'), 'Once upon a time\nthere was');
  eq(await page.locator('#log .msg').count(), 0);
  await page.press('#input', 'Enter');
  eq(await page.inputValue('#input'), '');
  await page.waitForFunction(() => document.getElementById('stop').disabled, null, { timeout: 15000 });
  await cdp.send('Network.emulateNetworkConditions',
    { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await cdp.detach();
  await page.unroute('**/v1/chat/completions');
  eq(await page.textContent('#log .msg.user .body'), 'Once upon a time\nthere was');
  eq(await lastReply().locator('.note').textContent(), 'stopped at the max tokens setting');
  const shown = (await lastReply().locator('.body').innerText()).replace(/\s+/g, ' ').trim();
  const final = (await lastReply().locator('.body').textContent()).length;
  const parts = await page.evaluate((n) => [...window.lens].filter((k) => k > 0 && k < n), final);
  assert(parts.length >= 1, 'the answer showed only when whole: no streaming');
  const ref = await client.chat.completions.create({ model, temperature: 0, max_tokens: 200, ignore_eos: true,
    messages: [{ role: 'user', content: 'Once upon a time\nthere was' }] });
  eq(shown, ref.choices[0].message.content.replace(/\s+/g, ' ').trim(), 'the page shows what the server said');
});

test('markdown renders; model output cannot inject markup; reasoning is a collapsed thinking block', async () => {
  await page.route('**/v1/chat/completions', (route) => route.fulfill({ status: 200,
    headers: { 'Content-Type': 'text/event-stream' },
    body: sse([{ reasoning_content: 'Let me **think** <b>hard</b>' },
      { content: '# Title\n## Sub\nSome **bold**, *italic*, _under_ and `code <i>x</i>`.\n\n' },
      { content: '- one\n- two\n  - nested\n\n1. first\n2. second\n\n' },
      { content: '```js\nif (a < b) alert("<script>")\n```\n' },
      { content: '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>\n' },
      { content: '[safe](https://example.com/a?b=1) [bad](javascript:window.pwned=3) > not a quote\n> quoted' }]) }));
  await ask('show me markdown');
  await page.unroute('**/v1/chat/completions');
  const reply = lastReply();
  eq(await reply.locator('.body h1').textContent(), 'Title');
  eq(await reply.locator('.body h2').textContent(), 'Sub');
  eq(await reply.locator('.body strong').textContent(), 'bold');
  eq(await reply.locator('.body em').allTextContents(), ['italic', 'under']);
  eq(await reply.locator('.body p code').textContent(), 'code <i>x</i>');
  eq(await reply.locator('.body > ul > li').count(), 2);
  eq(await reply.locator('.body ul ul li').textContent(), 'nested');
  eq(await reply.locator('.body ol li').allTextContents(), ['first', 'second']);
  eq(await reply.locator('.body pre code').textContent(), 'if (a < b) alert("<script>")');
  eq(await reply.locator('.body pre code').getAttribute('data-lang'), 'js');
  eq(await reply.locator('.body a').count(), 1);
  eq(await reply.locator('.body a').getAttribute('href'), 'https://example.com/a?b=1');
  eq(await reply.locator('.body a').getAttribute('rel'), 'noopener noreferrer');
  eq(await reply.locator('.body blockquote').textContent(), 'quoted');
  eq(await page.locator('#log img, #log script, #log i, #log b').count(), 0);
  const text = await reply.locator('.body').textContent();
  assert(text.includes('<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'), 'markup shown as text');
  assert(text.includes('bad') && !text.includes('javascript:'), 'an unsafe link is plain text');
  eq(await page.evaluate(() => window.pwned), undefined);
  const think = reply.locator('details.thinking');
  assert(await think.isVisible(), 'thinking block shown');
  eq(await think.getAttribute('open'), null);
  eq(await think.locator('.md').textContent(), 'Let me think <b>hard</b>');
  await think.locator('summary').click();
  assert(await think.locator('.md strong').isVisible(), 'the thinking block opens');
  await page.click('#settings summary');  // closed for the picture
  await reply.scrollIntoViewIfNeeded();
  await page.screenshot({ path: `${SHOTS}/webui.png` });
});

test('an error answer shows a clear error line and gives the message back', async () => {
  const n = await page.locator('#log .msg').count();
  await setField('max_tokens', 3e9);
  await ask('too many tokens');
  const err = await page.textContent('#error');
  assert(/^Error 400: .*max_tokens/.test(err), err);
  eq(await page.inputValue('#input'), 'too many tokens');
  eq(await page.locator('#log .msg').count(), n);
  await setField('max_tokens', 1900);
  await page.fill('#input', '');
});

test('New chat empties the view; Stop aborts the stream; the server frees the slot and keeps serving', async () => {
  await page.click('#clear');  // a short prompt: a sanitizer build prefills slowly
  eq(await page.locator('#log .msg').count(), 0);
  const before = await metrics();
  // a long answer: the page's own request, made to ignore the end of text
  await page.route('**/v1/chat/completions', (route) =>
    route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), ignore_eos: true }) }));
  await page.fill('#input', 'Tell me a long story');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('#log .msg.assistant .body')].pop();
    return b && b.textContent.length > 20;
  });
  assert(await page.isEnabled('#stop') && await page.isDisabled('#send'), 'Stop is live while streaming');
  await page.click('#stop');
  await page.waitForFunction(() => document.getElementById('stop').disabled);
  await page.unroute('**/v1/chat/completions');
  eq(await lastReply().locator('.note').textContent(), 'stopped');
  assert(await page.isHidden('#error'), 'a stop is no error');
  const len = (await lastReply().locator('.body').textContent()).length;
  let m = before;
  for (let i = 0; i < 50; i++) {
    m = await metrics();
    if (m.brisk_client_disconnects_total > before.brisk_client_disconnects_total && m.brisk_slots_active === 0) break;
    await sleep(100);
  }
  eq(m.brisk_client_disconnects_total, before.brisk_client_disconnects_total + 1, 'disconnects');
  eq(m.brisk_slots_active, 0, 'slots active');
  eq((await lastReply().locator('.body').textContent()).length, len, 'nothing more arrived');
  eq((await fetch(`${BASE}/health`)).status, 200);
  await setField('max_tokens', 24);
  await ask('And then?');
  eq(await lastReply().locator('.note').textContent(), 'stopped at the max tokens setting');
  assert((await lastReply().locator('.body').textContent()).length > 0, 'the next turn answers');
});

test('a dark, narrow screenshot; no page errors, no outside requests', async () => {
  if ((await page.locator('#settings').getAttribute('open')) !== null) await page.click('#settings summary');
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.setViewportSize({ width: 390, height: 800 });
  await page.screenshot({ path: `${SHOTS}/webui-dark-narrow.png` });
  eq(problems, []);
});

test('the browser closes', () => browser.close());

await run();
