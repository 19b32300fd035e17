// tests/server/page.mjs MODE PORT OUTDIR [KEY]: the chat page (GET /) in headless
// Chromium (CHROMIUM, default /usr/bin/chromium) against a running `celer serve`.
//   chat: the page loads under its CSP with no other origin; it shows the model's name;
//         an out-of-range setting is named and nothing is sent;
//         greedy answers typed in the page equal the API's for the same conversation and
//         settings (two turns); the timing line shows the server's `timings` with the API's token counts; Stop ends an
//         answer early (a prefix of the API's for the seed) and the next message works;
//         screenshot OUTDIR/page.png.
//   key:  (server started with --api-key KEY) a message asks for the key, a wrong key is
//         asked again, the right one answers and stays in sessionStorage across a reload;
//         Cancel leaves an error; screenshot OUTDIR/page-key.png.
// Prints ok/FAIL lines (tests/cli_page.sh counts them).
import path from 'node:path';
import { Browser, sleep } from './cdp.mjs';
import { bad, check, failures, kase, ok } from './lib.mjs';

const [mode, port, outdir, key] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const bin = process.env.CHROMIUM || '/usr/bin/chromium';
const last = `document.querySelector('#log article.assistant:last-of-type')`;

async function api(messages, extra) {
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ messages, ...extra }),
  });
  if (r.status !== 200) throw new Error(`API ${r.status}: ${await r.text()}`);
  return r.json();
}

// Types the settings into the page's fields.
async function settings(b, s) {
  for (const [id, v] of Object.entries(s)) await b.type(`#${id}`, String(v));
}

// Sends MESSAGE from the page (Enter in the text box) and waits for the answer to end.
async function say(b, message, timeoutMs = 120000) {
  const n = await b.eval(`document.querySelectorAll('#log article.assistant').length`);
  await b.type('#input', message);
  await b.press('Enter');
  await b.waitFor(`document.querySelectorAll('#log article.assistant').length > ${n}`, 'the answer to appear', 10000);
  return b.waitFor(`${last}.dataset.state && { state: ${last}.dataset.state, text: ${last}.querySelector('.text').textContent,
    meta: ${last}.querySelector('.meta').textContent }`, 'the answer to end', timeoutMs);
}

const b = await Browser.launch(bin);
const foreign = [];
const problems = [];
b.on((m) => {
  if (m.method === 'Network.requestWillBeSent') {
    const u = m.params.request.url;
    if (!u.startsWith(base + '/') && !u.startsWith('data:')) foreign.push(u);
  }
  if (m.method === 'Runtime.exceptionThrown') problems.push(m.params.exceptionDetails.exception?.description || m.params.exceptionDetails.text);
});
try {
  await b.send('Page.enable');
  await b.send('Runtime.enable');
  await b.send('Network.enable');
  // CSP violations land here (a script added by the protocol is outside the page's CSP)
  await b.send('Page.addScriptToEvaluateOnNewDocument', {
    source: `window.__csp = []; document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`,
  });
  const doc = b.event('Network.responseReceived', (p) => p.type === 'Document');
  await b.navigate(base + '/');
  const resp = (await doc).response;
  const h = Object.fromEntries(Object.entries(resp.headers).map(([k, v]) => [k.toLowerCase(), v]));
  const csp = h['content-security-policy'] || '';
  check('GET /: 200 text/html with a strict CSP', resp.status === 200 && h['content-type'] === 'text/html; charset=utf-8' &&
    /default-src 'none'/.test(csp) && /script-src 'sha256-[A-Za-z0-9+/]+=*'(;|$)/.test(csp) &&
    /style-src 'sha256-[A-Za-z0-9+/]+=*'(;|$)/.test(csp) && /connect-src 'self'/.test(csp) && !/unsafe|\*/.test(csp),
  JSON.stringify([resp.status, h['content-type'], csp]));

  const models = await (await fetch(`${base}/v1/models`)).json();
  const id = models.data[0].id;
  await kase('the page shows the model name', async () => {
    const shown = await b.waitFor(`document.querySelector('#model-name').textContent !== 'loading…' && document.querySelector('#model-name').textContent`, 'the model name', 20000);
    check('the page shows the model name', shown === id, `'${shown}' vs /v1/models '${id}'`);
  });

  if (mode === 'chat') {
    const greedy = { temperature: 0, top_p: 0.95, max_tokens: 40, seed: 7 };
    await kase('a bad setting is named, nothing is sent', async () => {
      await settings(b, { temperature: 5 });
      await b.type('#input', 'kept');
      await b.press('Enter');
      const e = await b.waitFor(`!document.querySelector('#error').hidden && document.querySelector('#error').textContent`, 'the error', 10000);
      const st = await b.eval(`[document.querySelector('#input').value, document.querySelectorAll('#log article').length]`);
      check('a bad setting is named, nothing is sent', /^temperature: /.test(e) && st[0] === 'kept' && st[1] === 0, JSON.stringify([e, st]));
    });
    await kase('greedy answers equal the API', async () => {
      await settings(b, greedy);
      const q1 = 'And it came to pass', q2 = 'Who made the heaven?';
      const a1 = await say(b, q1);
      const r1 = await api([{ role: 'user', content: q1 }], greedy);
      check('turn 1: the page shows the API answer', a1.state === 'done' && a1.text === r1.choices[0].message.content && a1.text.length > 0,
        JSON.stringify([a1, r1.choices[0].message.content]));
      // the server's `timings` (the stream's last chunks): the prompt's and the answer's
      // token counts are the API's, and a rate is shown
      const t = /server timings: prompt (\d+) tokens(?: \(\+(\d+) cached\))? in [\d.]+ m?s · generated (\d+) tokens in [\d.]+ m?s \([\d.]+ tok\/s\)/.exec(a1.meta);
      const cached1 = r1.usage.prompt_tokens_details.cached_tokens;
      check('turn 1: the server timings line (the API token counts)', t && Number(t[3]) === r1.usage.completion_tokens &&
        Number(t[1]) + Number(t[2] || 0) === r1.usage.prompt_tokens && r1.timings && r1.timings.predicted_n === r1.usage.completion_tokens,
        `'${a1.meta}' vs ${JSON.stringify(r1.usage)} (cached ${cached1})`);
      const a2 = await say(b, q2);
      const r2 = await api([{ role: 'user', content: q1 }, { role: 'assistant', content: a1.text }, { role: 'user', content: q2 }], greedy);
      check('turn 2: the page sends the conversation', a2.state === 'done' && a2.text === r2.choices[0].message.content,
        JSON.stringify([a2, r2.choices[0].message.content]));
      await b.screenshot(path.join(outdir, 'page.png'));
    });
    await kase('Stop ends a long answer', async () => {
      await b.click('#new-chat');
      check('New chat empties the conversation', (await b.eval(`document.querySelectorAll('#log article').length`)) === 0, 'articles left');
      // the default model answers in tens of tokens, faster than a click: the browser's
      // download is throttled (1 kB/s, about 5 chunks a second) so the answer is still
      // arriving when Stop is pressed
      const long = { temperature: 1.5, top_p: 1, max_tokens: 900, seed: 1 };
      const q = 'And it came to pass';
      const full = await api([{ role: 'user', content: q }], long);
      if (full.usage.completion_tokens < 40) throw new Error(`the full answer is only ${full.usage.completion_tokens} tokens: pick a longer one`);
      await settings(b, long);
      await b.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 1000, uploadThroughput: -1 });
      await b.type('#input', q);
      await b.click('#send');
      await b.waitFor(`${last} && ${last}.querySelector('.text').textContent.length > 0`, 'the first token', 60000);
      check('Stop is enabled while streaming', await b.eval(`!document.querySelector('#stop').disabled && document.querySelector('#send').disabled`), 'buttons');
      await b.click('#stop');
      const a = await b.waitFor(`${last}.dataset.state && { state: ${last}.dataset.state, text: ${last}.querySelector('.text').textContent,
        meta: ${last}.querySelector('.meta').textContent }`, 'the stopped answer', 30000);
      const whole = full.choices[0].message.content;
      check('Stop: the answer is stopped, a prefix of the full one', a.state === 'stopped' && /^stopped/.test(a.meta) &&
        a.text.length > 0 && a.text.length < whole.length && whole.startsWith(a.text), JSON.stringify([a, whole.length]));
      await sleep(500);
      await b.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
      check('Stop: nothing more arrives', (await b.eval(`${last}.querySelector('.text').textContent`)) === a.text, 'text grew');
      check('Stop: Send is back', await b.eval(`!document.querySelector('#send').disabled && document.querySelector('#stop').disabled`), 'buttons');
      await settings(b, { max_tokens: 8 });
      const next = await say(b, 'Amen');
      check('after Stop the next message is answered', next.state === 'done' && next.text.length > 0, JSON.stringify(next));
    });
  } else if (mode === 'key') {
    const greedy = { temperature: 0, top_p: 0.95, max_tokens: 16, seed: 3 };
    const q = 'In the beginning';
    const dialogOpen = `document.querySelector('#key-dialog').open`;
    await kase('the api-key flow', async () => {
      await settings(b, greedy);
      await b.type('#input', q);
      await b.press('Enter');
      await b.waitFor(dialogOpen, 'the key dialog', 30000);
      check('a 401 asks for the key', await b.eval(`document.activeElement.id === 'key-input'`), 'focus is not in the key field');
      await b.screenshot(path.join(outdir, 'page-key.png'));
      await b.type('#key-input', 'wrong-' + key);
      await b.press('Enter');
      // the dialog closes and, after the 401, opens again at once: wait for its new text
      await b.waitFor(`${dialogOpen} && /refused/.test(document.querySelector('#key-why').textContent)`, 'the key to be asked again', 30000);
      ok('a wrong key is asked again');
      await b.type('#key-input', key);
      await b.click('#key-ok');
      const a = await b.waitFor(`${last}.dataset.state && { state: ${last}.dataset.state, text: ${last}.querySelector('.text').textContent }`, 'the answer', 120000);
      const r = await api([{ role: 'user', content: q }], greedy);
      check('the right key: the API answer', a.state === 'done' && a.text === r.choices[0].message.content, JSON.stringify([a, r.choices[0].message.content]));
      check('the key is kept in sessionStorage', (await b.eval(`sessionStorage.getItem('celer-api-key')`)) === key, 'not stored');
      await b.navigate(base + '/');
      await settings(b, greedy);
      const again = await say(b, q);
      check('after a reload the stored key is sent', again.state === 'done' && again.text === a.text && !(await b.eval(dialogOpen)), JSON.stringify(again));
      await b.eval(`sessionStorage.clear()`);
      await b.type('#input', q);
      await b.press('Enter');
      await b.waitFor(dialogOpen, 'the key dialog', 30000);
      await b.click('#key-cancel');
      const c = await b.waitFor(`${last}.dataset.state && { state: ${last}.dataset.state, meta: ${last}.querySelector('.meta').textContent }`, 'the cancelled answer', 30000);
      check('Cancel: the answer says a key is needed', c.state === 'error' && /needs an API key/.test(c.meta), JSON.stringify(c));
    });
  } else {
    bad('mode', `unknown mode '${mode}'`);
  }
  const csps = await b.eval('window.__csp');
  check('no CSP violation, no script error', csps.length === 0 && problems.length === 0, JSON.stringify([csps, problems]));
  check('no request leaves the server', foreign.length === 0, foreign.join(' '));
} catch (e) {
  bad('page', (e && e.stack) || e);
} finally {
  await b.close();
}
process.exit(failures() ? 1 : 0);
