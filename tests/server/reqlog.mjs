// tests/server/reqlog.mjs MODE PORT LOG [KEY]: the request log (LOG: the server's
// stderr), `timings`, response ids and /slots against `celer serve` on models/default.
//   text:  (--slots --api-key KEY -np 2) one text line per request: time, client,
//          method, path, status, prompt/cached/generated tokens (the response's usage),
//          ttft and tok/s (the response's timings), total; errors with the answer's
//          message; a stream logs when it ends, a client that leaves mid-stream or
//          mid-answer is marked with what was generated; a path cannot forge a line.
//          `timings` in /completion, chat and completions, streamed and not (the
//          counts are the usage's, the rates are count / time); ids: 240 requests, all
//          different, prefix + 29 base62 characters, every base62 character seen, one
//          id per stream; /slots while a stream runs and after, and its key.
//   json:  (--log-format json -v) every stderr line is one JSON object; request lines
//          have the stable keys, the verbose ones (id, slot, finish_reason, sampling,
//          headers) agree with the request and its response.
//   vtext: (-v) text lines carry id, slot, finish, sampling and the user agent.
//   quiet: (--quiet) nothing but failed requests: no startup line, no line for a 200.
//   noslots: /slots without --slots is 501 naming the flag.
// Prints ok/FAIL lines (tests/cli_serve_log.sh counts them).
import fs from 'node:fs';
import http from 'node:http';
import { check, kase, done, raw, sleep, until } from './lib.mjs';

const [mode, port, logPath, key] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const auth = key ? { Authorization: `Bearer ${key}` } : {};

const lines = () => fs.readFileSync(logPath, 'utf8').split('\n').filter((l) => l.length);
// The lines that appear after the first n (at least want of them), bounded in time.
async function newLines(n, want = 1, ms = 30000) {
  await until(() => lines().length >= n + want, ms);
  return lines().slice(n);
}
async function post(path, body, headers = auth) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}
// A streamed request: every parsed data frame.
async function stream(path, body) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...auth }, body: JSON.stringify({ ...body, stream: true }) });
  const text = await r.text();
  return text.split('\n\n').map((f) => f.replace(/^data: /, '')).filter((f) => f && f !== '[DONE]' && f[0] === '{').map((f) => JSON.parse(f));
}
// Starts a stream and leaves after `frames` frames (the socket is destroyed).
function streamAndLeave(path, body, frames) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify({ ...body, stream: true });
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data), ...auth } }, (res) => {
      let seen = 0;
      res.on('data', (d) => {
        seen += (d.toString().match(/\ndata: |^data: /g) || []).length;
        if (seen >= frames) { req.destroy(); resolve(seen); }
      });
      res.on('end', () => resolve(seen));
    });
    req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
    req.end(data);
  });
}

// text line: TIME CLIENT METHOD PATH STATUS k=v ... [disconnected] [error="..."]
function parseText(line) {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) (\S+) (\S+) (\d+)(.*)$/.exec(line);
  if (!m) return null;
  const o = { time: m[1], client: m[2], method: m[3], path: m[4], status: Number(m[5]), rest: m[6], disconnected: / disconnected( |$)/.test(m[6]) };
  for (const kv of m[6].matchAll(/ ([a-z_]+)=("(?:[^"\\]|\\.)*"|\S+)/g)) o[kv[1]] = kv[2][0] === '"' ? kv[2].slice(1, -1) : kv[2];
  return o;
}
const near = (a, b, tol) => Math.abs(a - b) <= tol;
// timings as llama-server defines them, and agreeing with usage
function timingsOk(t, usage) {
  if (!t) return false;
  const keys = ['prompt_n', 'prompt_ms', 'prompt_per_token_ms', 'prompt_per_second', 'predicted_n', 'predicted_ms',
    'predicted_per_token_ms', 'predicted_per_second', 'cache_n'];
  if (!keys.every((k) => typeof t[k] === 'number' && t[k] >= 0)) return false;
  const rate = (n, ms) => (ms > 0 ? (n * 1000) / ms : 0);
  return t.predicted_n === usage.completion && t.prompt_n + t.cache_n === usage.prompt && t.cache_n === usage.cached &&
    near(t.predicted_per_second, rate(t.predicted_n, t.predicted_ms), 0.001 + t.predicted_per_second * 1e-9) &&
    near(t.prompt_per_second, rate(t.prompt_n, t.prompt_ms), 0.001 + t.prompt_per_second * 1e-9) &&
    (t.predicted_n === 0 || near(t.predicted_per_token_ms, t.predicted_ms / t.predicted_n, 0.01));
}
const chatBody = (content, extra = {}) => ({ messages: [{ role: 'user', content }], temperature: 0, max_tokens: 12, ...extra });

if (mode === 'text') {
  await kase('log: a chat request', async () => {
    const n = lines().length;
    const r = await post('/v1/chat/completions', chatBody('Who made the heaven?'));
    const [l] = await newLines(n);
    const p = parseText(l || '');
    const u = r.json.usage;
    check('log: one text line for a chat request', p && p.method === 'POST' && p.path === '/v1/chat/completions' && p.status === 200 &&
      /^127\.0\.0\.1:\d+$/.test(p.client) && Math.abs(Date.parse(p.time) - Date.now()) < 600000, l);
    check('log: tokens are the usage', p && Number(p.prompt) === u.prompt_tokens && Number(p.cached) === u.prompt_tokens_details.cached_tokens &&
      Number(p.gen) === u.completion_tokens, `${l} vs ${JSON.stringify(u)}`);
    const t = r.json.timings;
    check('log: ttft, tok/s and total', p && Number(p.ttft_ms) > 0 && t && near(Number(p.tok_s), t.predicted_per_second, 0.051) &&
      Number(p.total_ms) >= Number(p.ttft_ms) && !p.disconnected && !('id' in p), `${l} vs ${JSON.stringify(t)}`);
    check('log: the default line has no verbose fields', p && !/ (id|slot|user_agent)=/.test(p.rest), l);
  });
  await kase('log: errors', async () => {
    let n = lines().length;
    const r = await post('/v1/chat/completions', chatBody('x', { top_p: 5 }));
    let [l] = await newLines(n);
    let p = parseText(l || '');
    check('log: a 400 with its message', r.status === 400 && p && p.status === 400 && p.error === r.json.error.message, `${l} vs ${JSON.stringify(r.json)}`);
    n = lines().length;
    const r2 = await post('/v1/completions', { prompt: 'x' }, {});
    [l] = await newLines(n);
    p = parseText(l || '');
    check('log: a 401 with its message', r2.status === 401 && p && p.status === 401 && p.path === '/v1/completions' && /Invalid API key/.test(p.error), l);
    n = lines().length;
    const r3 = await raw(port, `GET /no/such%0a2026-01-01T00:00:00.000Z 1.2.3.4:5 GET /forged 200 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
    const got = await newLines(n);
    p = parseText(got[0] || '');
    check('log: a 404; a path cannot forge a line', r3.status === 404 && got.length === 1 && p && p.status === 404 &&
      p.path === '/no/such\\x0a2026-01-01T00:00:00.000Z\\x201.2.3.4:5\\x20GET\\x20/forged\\x20200' && p.error === 'no such endpoint', JSON.stringify(got));
  });
  await kase('log: a stream logs at its end', async () => {
    const n = lines().length;
    const frames = await stream('/v1/chat/completions', chatBody('And it came to pass', { max_tokens: 20, stream_options: { include_usage: true } }));
    const u = frames.find((f) => f.usage).usage;
    const [l] = await newLines(n);
    const p = parseText(l || '');
    check('log: a finished stream', p && p.status === 200 && Number(p.gen) === u.completion_tokens && Number(p.prompt) === u.prompt_tokens && !p.disconnected, `${l} vs ${JSON.stringify(u)}`);
  });
  await kase('log: a client that leaves', async () => {
    let n = lines().length;
    await streamAndLeave('/v1/completions', { prompt: 'And it came to pass', max_tokens: 900, ignore_eos: true, temperature: 1 }, 4);
    let [l] = await newLines(n);
    let p = parseText(l || '');
    check('log: a stream cut by its client: marked, with what was generated', p && p.status === 200 && p.disconnected &&
      Number(p.gen) >= 3 && Number(p.gen) < 900, l);
    n = lines().length;
    // a plain request whose client leaves before the answer: 499 (nothing was answered)
    await new Promise((resolve) => {
      const data = JSON.stringify({ prompt: 'And it came to pass', max_tokens: 900, ignore_eos: true, temperature: 1 });
      const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': data.length, ...auth } });
      req.on('error', () => resolve());
      req.end(data);
      setTimeout(() => { req.destroy(); resolve(); }, 300);
    });
    [l] = await newLines(n);
    p = parseText(l || '');
    check('log: a plain request cut by its client: 499, marked', p && p.status === 499 && p.disconnected && Number(p.gen) < 900, l);
  });
  await kase('timings', async () => {
    const usage = (u) => ({ prompt: u.prompt_tokens, completion: u.completion_tokens, cached: u.prompt_tokens_details.cached_tokens });
    const a = await post('/v1/chat/completions', chatBody('In the beginning God created', { max_tokens: 16 }));
    check('timings: chat', timingsOk(a.json.timings, usage(a.json.usage)), JSON.stringify(a.json));
    const b = await post('/v1/chat/completions', chatBody('In the beginning God created', { max_tokens: 16 }));
    check('timings: chat, the prompt from the cache (cache_n)', timingsOk(b.json.timings, usage(b.json.usage)) && b.json.timings.cache_n > 0, JSON.stringify(b.json));
    const c = await post('/v1/completions', { prompt: 'And the earth was', max_tokens: 10, temperature: 0 });
    check('timings: completions', timingsOk(c.json.timings, usage(c.json.usage)), JSON.stringify(c.json));
    const d = await post('/completion', { prompt: 'And the earth was', n_predict: 10, temperature: 0 });
    check('timings: /completion', d.status === 200 && timingsOk(d.json.timings, { prompt: d.json.tokens_evaluated, completion: d.json.tokens_predicted, cached: d.json.tokens_cached }), JSON.stringify(d.json));
    const f = await stream('/v1/chat/completions', chatBody('And God said', { max_tokens: 10, stream_options: { include_usage: true } }));
    const fin = f.find((x) => x.choices && x.choices[0] && x.choices[0].finish_reason);
    const last = f[f.length - 1];
    check('timings: a chat stream: in the finish chunk and the final (usage) chunk',
      fin && fin.timings && timingsOk(last.timings, usage(last.usage)) && fin.timings.predicted_n === last.usage.completion_tokens &&
      f.filter((x) => x.timings).length === 2, JSON.stringify(f.slice(-2)));
    const g = await stream('/v1/completions', { prompt: 'And God said', max_tokens: 10, temperature: 0, ignore_eos: true });
    const gl = g[g.length - 1];
    check('timings: a completions stream without usage: in the last chunk', gl.timings && gl.choices[0].finish_reason &&
      gl.timings.predicted_n === 10 && g.filter((x) => x.timings).length === 1, JSON.stringify(gl));
    const h = await stream('/completion', { prompt: 'And God said', n_predict: 10, temperature: 0 });
    const hl = h[h.length - 1];
    check('timings: a /completion stream: in the final frame', hl.stop === true &&
      timingsOk(hl.timings, { prompt: hl.tokens_evaluated, completion: hl.tokens_predicted, cached: hl.tokens_cached }), JSON.stringify(hl));
  });
  await kase('ids', async () => {
    const ids = [];
    const one = async (i) => {
      const chat = i % 2 === 0;
      const r = await post(chat ? '/v1/chat/completions' : '/v1/completions', chat ? chatBody('x', { max_tokens: 1 }) : { prompt: 'x', max_tokens: 1 });
      ids[i] = r.json.id;
    };
    for (let i = 0; i < 240; i += 8) await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((k) => one(i + k)));
    const bad = ids.filter((id, i) => !(i % 2 === 0 ? /^chatcmpl-[0-9A-Za-z]{29}$/ : /^cmpl-[0-9A-Za-z]{29}$/).test(id));
    check('ids: chatcmpl-/cmpl- and 29 base62 characters', ids.length === 240 && bad.length === 0 &&
      ids.filter((id) => id.startsWith('cmpl-')).length === 120, JSON.stringify(bad.slice(0, 5)));
    check('ids: 240 requests, 240 ids', new Set(ids).size === 240, `${new Set(ids).size} distinct`);
    const chars = new Set(ids.map((id) => id.split('-')[1]).join(''));
    check('ids: every base62 character appears (random over the whole alphabet)', chars.size === 62, `${chars.size} characters`);
    const f = await stream('/v1/chat/completions', chatBody('x', { max_tokens: 5 }));
    check('ids: one id across a stream', f.length > 1 && f.every((x) => x.id === f[0].id) && /^chatcmpl-[0-9A-Za-z]{29}$/.test(f[0].id) && !ids.includes(f[0].id),
      JSON.stringify(f.map((x) => x.id)));
  });
  await kase('/slots', async () => {
    const r0 = await fetch(base + '/slots');
    check('/slots needs the key', r0.status === 401, String(r0.status));
    const body = { prompt: 'And it came to pass', max_tokens: 900, ignore_eos: true, temperature: 1.25, top_k: 17, seed: 4242 };
    const running = stream('/v1/completions', body);
    let busy = null;
    await until(async () => {
      const s = await (await fetch(base + '/slots', { headers: auth })).json();
      // this request's slot (by its seed): a slot may still be finishing an earlier one
      busy = s.find((x) => x.is_processing && x.params.seed === 4242 && x.next_token.n_decoded > 2);
      return !!busy;
    }, 60000);
    const slots = await (await fetch(base + '/slots', { headers: auth })).json();
    check('/slots: an array of the -np slots', Array.isArray(slots) && slots.length === 2 && slots.every((x, i) => x.id === i && x.n_ctx === 1024 &&
      typeof x.id_task === 'number' && typeof x.params === 'object' && typeof x.next_token === 'object'), JSON.stringify(slots));
    check('/slots: the running request: its task, sampling and progress', busy && busy.id_task > 0 && busy.params.temperature === 1.25 &&
      busy.params.top_k === 17 && busy.params.seed === 4242 && busy.params.n_predict === 900 && busy.params.stream === true &&
      busy.next_token.has_next_token === true && busy.next_token.n_remain === 900 - busy.next_token.n_decoded &&
      busy.n_past >= busy.n_prompt_tokens, JSON.stringify(busy));
    await running;
    let after = null;
    await until(async () => {
      after = await (await fetch(base + '/slots', { headers: auth })).json();
      return after.every((x) => !x.is_processing);
    }, 30000);
    check('/slots: idle after the end', after.every((x) => !x.is_processing && x.id_task === -1), JSON.stringify(after));
  });
} else if (mode === 'json') {
  await kase('json log', async () => {
    const n = lines().length;
    const r = await post('/v1/chat/completions', chatBody('Who made the heaven?', { temperature: 0.5, top_k: 7, seed: 99 }), { ...auth, 'User-Agent': 'reqlog-test/1' });
    const e = await post('/v1/chat/completions', chatBody('x', { max_tokens: -3 }));
    const got = await newLines(n, 2);
    const all = lines();
    let parsed = 0;
    for (const l of all) { try { JSON.parse(l); parsed++; } catch (err) { /* counted */ } }
    check('json: every stderr line is a JSON object (startup lines too)', parsed === all.length && /listening on http/.test(JSON.parse(all[0]).message), all.join('\n'));
    const a = JSON.parse(got[0]), b = JSON.parse(got[1]);
    const baseKeys = ['time', 'level', 'client', 'method', 'path', 'status', 'prompt_tokens', 'cached_tokens', 'generated_tokens',
      'ttft_ms', 'tokens_per_second', 'total_ms', 'disconnected', 'error'];
    check('json: the stable keys, in order', JSON.stringify(Object.keys(a).slice(0, baseKeys.length)) === JSON.stringify(baseKeys) &&
      JSON.stringify(Object.keys(b).slice(0, baseKeys.length)) === JSON.stringify(baseKeys), JSON.stringify([Object.keys(a), Object.keys(b)]));
    const u = r.json.usage;
    check('json: the request', a.status === 200 && a.level === 'info' && a.path === '/v1/chat/completions' && a.prompt_tokens === u.prompt_tokens &&
      a.generated_tokens === u.completion_tokens && a.cached_tokens === u.prompt_tokens_details.cached_tokens && a.ttft_ms > 0 &&
      near(a.tokens_per_second, r.json.timings.predicted_per_second, 0.01) && a.error === null && a.disconnected === false, got[0]);
    check('json -v: id, slot, finish, sampling, headers', a.id === r.json.id && a.slot >= 0 && a.slot < 2 &&
      a.finish_reason === r.json.choices[0].finish_reason && a.sampling.temperature === 0.5 && a.sampling.top_k === 7 && a.sampling.seed === 99 &&
      a.max_tokens === 12 && a.stream === false && a.user_agent === 'reqlog-test/1' && a.has_key === true && a.content_type === 'application/json' &&
      a.body_bytes > 10, got[0]);
    check('json: an error line', b.status === 400 && b.level === 'error' && b.error === e.json.error.message && b.generated_tokens === 0 && b.ttft_ms === null, got[1]);
  });
} else if (mode === 'vtext') {
  await kase('verbose text log', async () => {
    const n = lines().length;
    const r = await post('/v1/completions', { prompt: 'And it came', max_tokens: 6, temperature: 0.7, seed: 5 }, { 'User-Agent': 'vtext "quoted"' });
    const [l] = await newLines(n);
    const p = parseText(l || '');
    check('-v: id, slot, finish and sampling', p && p.id === r.json.id && /^[01]$/.test(p.slot) && p.finish === r.json.choices[0].finish_reason &&
      p.temperature === '0.7' && p.seed === '5' && p.max_tokens === '6' && p.stream === '0', l);
    check('-v: headers, escaped', p && p.user_agent === 'vtext \\x22quoted\\x22' && p.content_type === 'application/json', l);
  });
} else if (mode === 'quiet') {
  // the harness found the server ready by polling /health, whose 503s while the model
  // loads are failed requests too (logged under --quiet; a slow build, as under
  // ASan, meets some): the lines after those are this case's
  const probes = lines().filter((l) => / GET \/health 503 .*Loading model/.test(l)).length;
  const served = () => lines().slice(probes);
  await kase('quiet', async () => {
    const ok200 = await post('/v1/completions', { prompt: 'x', max_tokens: 2 });
    const bad = await post('/v1/completions', { prompt: 'x', max_tokens: 'two' });
    await until(() => served().length >= 1, 10000);
    await sleep(300);
    let all = served();
    const p = parseText(all[0] || '');
    check('--quiet: only the failed request', ok200.status === 200 && bad.status === 400 && all.length === 1 && p && p.status === 400 &&
      p.error === bad.json.error.message, all.join('\n'));
    // headers that never end (--header-timeout 1): the guard's 408 is logged, with no request known
    const slow = await raw(port, 'GET /health HTTP/1.1\r\nHost: x\r\n', 30000);
    await until(() => served().length >= 2, 10000);
    all = served();
    const q = parseText(all[1] || '');
    check('--quiet: a 408 for slow headers is logged', slow.status === 408 && q && q.status === 408 && q.method === '-' && q.path === '-' &&
      /--header-timeout/.test(q.error), all.join('\n'));
  });
} else if (mode === 'noslots') {
  await kase('/slots without --slots', async () => {
    const r = await fetch(base + '/slots');
    const j = await r.json();
    check('/slots without --slots: 501 naming --slots', r.status === 501 && /--slots/.test(j.error.message), JSON.stringify(j));
  });
}
done();
