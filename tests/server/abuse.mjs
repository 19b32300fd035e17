// tests/server/abuse.mjs CASE PORT [ARGS]: attacks on `celer serve` over raw sockets
// (issue #23), each against a server started for it by tests/cli_serve_abuse.sh.
//   queue PORT      -np 1 --queue-size 4: queued clients that close their sockets give
//                   their places back at once (the metrics' queue depth drops, a new
//                   request is queued, not refused); queued clients that half-close keep
//                   theirs and get their answers (plain and streamed); a full queue
//                   answers 503 with Retry-After
//   burst PORT      -np 2 --queue-size 4, one slot busy: of 12 requests at once,
//                   exactly 5 (the free slot and 4 queued) are admitted
//   slow PORT       --header-timeout 2 --min-body-rate 1000 -to 60: headers trickled a
//                   byte at a time get 408 and the connection closes after ~2 s (not
//                   after the idle timeout, which each byte resets); so does a body
//                   trickled below the rate; the server serves the others meanwhile
//   key PORT KEY    --api-key: a keyless request with an 8 MB Content-Length is refused
//                   (401) before its body is sent; X-Api-Key works; a key with a NUL
//                   inside does not
//   memory PORT PID --max-body 9000000 --requests-ram 24: bodies that would cost far
//                   more than they weigh (645k chat messages, 8 MB of {}, a /tokenize
//                   answer 12x its body) get 413 naming the budget, with little RSS
//                   growth; bodies held open past --requests-ram make others 503
//   http PORT       half-closed clients get their answer (plain and streamed);
//                   conflicting Content-Length 400; Transfer-Encoding gzip, chunked 501;
//                   an endless chunked body gets 413 and is cut off; /detokenize of an
//                   id outside the vocabulary and max_tokens 2^30 are 400 naming them
import net from 'node:net';
import fs from 'node:fs';
import { check, kase, done, sleep, until, metrics } from './lib.mjs';

const [what, port, arg] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;

// A raw connection that collects what it receives.
function connect() {
  return new Promise((resolve, reject) => {
    const s = net.connect(+port, '127.0.0.1');
    const c = { s, data: Buffer.alloc(0), closed: false, error: null };
    s.on('data', (d) => { c.data = Buffer.concat([c.data, d]); });
    s.on('close', () => { c.closed = true; });
    s.on('error', (e) => { c.error = e; });
    s.once('connect', () => resolve(c));
    s.once('error', reject);
  });
}
// The final response in the bytes (interim 1xx responses skipped).
function parse(buf) {
  let t = buf.toString('latin1');
  while (/^HTTP\/1\.1 1\d\d /.test(t) && t.indexOf('\r\n\r\n') >= 0) t = t.slice(t.indexOf('\r\n\r\n') + 4);
  const m = /^HTTP\/1\.[01] (\d+)/.exec(t);
  const i = t.indexOf('\r\n\r\n');
  return { status: m ? +m[1] : 0, head: i >= 0 ? t.slice(0, i) : t, body: i >= 0 ? Buffer.from(t.slice(i + 4), 'latin1').toString('utf8') : '' };
}
function request(path, body, extra = '') {
  const b = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n${extra}\r\n`), b]);
}
// Sends bytes on a fresh connection and waits (bounded) for the server to close it.
async function exchange(bytes, { half = false, ms = 60000 } = {}) {
  const c = await connect();
  c.s.write(bytes);
  if (half) c.s.end(); // shutdown(SHUT_WR): still reading
  await until(() => c.closed || (parse(c.data).status >= 200 && complete(c.data)), ms);
  c.s.destroy();
  return parse(c.data);
}
function complete(buf) {
  const r = parse(buf);
  const m = /content-length: (\d+)/i.exec(r.head);
  if (m) return Buffer.byteLength(r.body) >= +m[1];
  return /\r\n0\r\n\r\n$/.test(buf.toString('latin1'));
}
const long = (extra) => ({ prompt: 'And it came to pass', max_tokens: 900, temperature: 0.8, ignore_eos: true, ...extra });
// The request that holds a slot: 8,000 tokens take tens of seconds of the default model
// (its servers run with -c 8192), so the slot stays busy until the test closes it; 900
// took ~0.6 s, which a slow machine's checks could outlast.
const holder = () => long({ stream: true, max_tokens: 8000 });
const rss = (pid) => +/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1] / 1024;

if (what === 'queue') {
  await kase('queue: disconnected clients give their places back', async () => {
    const hold = await connect(); // a stream holds the only slot
    hold.s.write(request('/v1/completions', holder()));
    await until(async () => (await metrics(base))['celer_slots_busy'] === 1, 30000);
    // two queued clients that half-close (shutdown(SHUT_WR)) and still read their answers
    const stay = await connect();
    stay.s.write(request('/v1/completions', { prompt: 'In the beginning', max_tokens: 4, temperature: 0 }));
    stay.s.end();
    const stay2 = await connect();
    stay2.s.write(request('/v1/completions', { prompt: 'In the beginning', max_tokens: 4, temperature: 0, stream: true }));
    stay2.s.end();
    const goers = [await connect(), await connect()];
    goers[0].s.write(request('/v1/completions', long({ stream: true }))); // a queued stream
    goers[1].s.write(request('/v1/completions', long()));                  // a queued plain request
    const full = await until(async () => (await metrics(base))['celer_queue_depth'] === 4, 30000);
    check('queue: four queued', full, JSON.stringify(await metrics(base)));
    const refused = await exchange(request('/v1/completions', { prompt: 'x', max_tokens: 1 }));
    check('queue: full queue 503 with Retry-After', refused.status === 503 && /retry-after: 1/i.test(refused.head) &&
      /queue is full/.test(refused.body), refused.head + refused.body);
    for (const g of goers) g.s.destroy();
    const freed = await until(async () => (await metrics(base))['celer_queue_depth'] === 2, 5000);
    const m = await metrics(base);
    check('queue: closed clients leave the queue at once', freed, `queue depth ${m['celer_queue_depth']}`);
    const next = await connect();
    next.s.write(request('/v1/completions', { prompt: 'In the beginning', max_tokens: 4, temperature: 0 }));
    const queued = await until(async () => (await metrics(base))['celer_queue_depth'] === 3, 5000);
    check('queue: a new request takes a freed place', queued && parse(next.data).status === 0, parse(next.data).head);
    await sleep(500); // the half-closed clients stay queued
    const kept = await metrics(base);
    check('queue: half-closed clients keep their places', kept['celer_queue_depth'] === 3 && kept['celer_slots_busy'] === 1,
      `queue depth ${kept['celer_queue_depth']}, slots busy ${kept['celer_slots_busy']}`);
    hold.s.destroy(); // the slot frees; the queued requests run
    await until(() => complete(stay.data) && complete(next.data) && /data: \[DONE\]/.test(stay2.data.toString()), 60000);
    check('queue: the queued requests are answered', parse(stay.data).status === 200 && parse(next.data).status === 200,
      parse(stay.data).head + ' / ' + parse(next.data).head);
    check('queue: a half-closed queued stream gets [DONE]', /data: \[DONE\]/.test(stay2.data.toString()),
      stay2.data.toString().slice(0, 300));
    for (const c of [stay, stay2, next]) c.s.destroy();
  });
} else if (what === 'burst') {
  await kase('burst: free slots + queue admitted', async () => {
    // one slot of two is busy, so the scheduler thread is stepping when the burst comes
    const hold = await connect();
    hold.s.write(request('/v1/completions', holder()));
    await until(async () => (await metrics(base))['celer_slots_busy'] === 1, 30000);
    const conns = await Promise.all(Array.from({ length: 12 }, () => connect()));
    for (const c of conns) c.s.write(request('/v1/completions', long({ max_tokens: 300 })));
    await until(() => conns.filter((c) => parse(c.data).status === 503).length >= 7, 20000);
    await sleep(300);
    const codes = conns.map((c) => parse(c.data).status);
    const refused = codes.filter((x) => x === 503).length;
    check('burst: 1 free slot + 4 queued admitted, 7 of 12 refused', refused === 7, codes.join());
    for (const c of conns) c.s.destroy();
    hold.s.destroy();
  });
} else if (what === 'slow') {
  await kase('slow: trickled headers get 408 at the header deadline', async () => {
    const socks = await Promise.all(Array.from({ length: 6 }, () => connect()));
    const head = 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ' + 'a'.repeat(200);
    const t0 = Date.now();
    let i = 0;
    const timer = setInterval(() => { for (const c of socks) if (!c.closed) c.s.write(head[i % head.length]); i++; }, 100);
    const h = await fetch(base + '/health'); // others are served meanwhile
    check('slow: /health answers during the trickle', h.status === 200, h.status);
    const closed = await until(() => socks.every((c) => c.closed), 15000);
    clearInterval(timer);
    const secs = (Date.now() - t0) / 1000;
    const r = parse(socks[0].data);
    check('slow: closed at the header deadline, not the idle timeout', closed && secs < 8, `${secs} s`);
    check('slow: 408 names --header-timeout', r.status === 408 && /--header-timeout/.test(r.body), r.head + r.body);
    for (const c of socks) c.s.destroy();
  });
  await kase('slow: a body below --min-body-rate gets 408', async () => {
    const c = await connect();
    c.s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"prompt":"');
    const t0 = Date.now();
    const timer = setInterval(() => { if (!c.closed) c.s.write('a'); }, 100);
    const closed = await until(() => c.closed, 20000);
    clearInterval(timer);
    const r = parse(c.data);
    check('slow body: 408 names --min-body-rate', closed && r.status === 408 && /--min-body-rate/.test(r.body),
      `${(Date.now() - t0) / 1000} s: ${r.head} ${r.body}`);
    c.s.destroy();
  });
  await kase('slow: a normal request after', async () => {
    const r = await exchange(request('/v1/completions', { prompt: 'In the beginning', max_tokens: 2, temperature: 0 }));
    check('slow: a normal request after', r.status === 200, r.head + r.body);
  });
} else if (what === 'key') {
  const key = arg;
  await kase('key: checked before the body', async () => {
    const c = await connect();
    c.s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n');
    const answered = await until(() => parse(c.data).status > 0, 10000);
    const r = parse(c.data);
    check('key: 401 before the body is sent', answered && r.status === 401, r.head);
    c.s.destroy();
  });
  await kase('key: X-Api-Key', async () => {
    const body = { prompt: 'In the beginning', max_tokens: 1, temperature: 0 };
    const good = await exchange(request('/v1/completions', body, `X-Api-Key: ${key}\r\n`));
    check('key: X-Api-Key accepted', good.status === 200, good.head + good.body);
    const bad = await exchange(request('/v1/completions', body, `X-Api-Key: ${key}x\r\n`));
    check('key: wrong X-Api-Key 401', bad.status === 401, bad.head);
    // libmicrohttpd ends a header value at a NUL, so a NUL inside the key leaves a
    // shorter key, which must not match
    const cut = key.slice(0, -1) + '\0' + key.slice(-1);
    for (const [name, h] of [['X-Api-Key', `X-Api-Key: ${cut}\r\n`], ['Bearer', `Authorization: Bearer ${cut}\r\n`]]) {
      const nul = await exchange(Buffer.concat([Buffer.from(request('/v1/completions', body, h))]));
      check(`key: ${name} with a NUL refused`, nul.status === 401 || nul.status === 400, nul.head);
    }
  });
} else if (what === 'memory') {
  const pid = arg;
  const before = rss(pid);
  await kase('memory: 645k chat messages 413', async () => {
    const body = '{"messages":[' + Array(645000).fill('{"role":"a"}').join(',') + ']}';
    const t0 = Date.now();
    const r = await exchange(request('/v1/chat/completions', body));
    check('memory: 645k messages 413 naming the budget', r.status === 413 && /budget/.test(r.body),
      `${r.status} ${r.body.slice(0, 300)} in ${Date.now() - t0} ms`);
  });
  await kase('memory: 8 MB of {} 413', async () => {
    const body = '{"prompt":"x","junk":[' + Array(2700000).fill('{}').join(',') + ']}';
    const r = await exchange(request('/v1/completions', body));
    check('memory: 8 MB of {} 413', r.status === 413 && /JSON values/.test(r.body), `${r.status} ${r.body.slice(0, 300)}`);
  });
  await kase('memory: /tokenize answer over 8x the body 413', async () => {
    const r = await exchange(request('/tokenize', { content: ' !'.repeat(400000), with_pieces: true }));
    check('memory: /tokenize with_pieces 413', r.status === 413 && /would exceed/.test(r.body), `${r.status} ${r.body.slice(0, 300)}`);
    const ok = await exchange(request('/tokenize', { content: 'In the beginning God created the heaven and the earth. '.repeat(100), with_pieces: true }));
    check('memory: ordinary /tokenize with_pieces 200', ok.status === 200 && JSON.parse(ok.body).tokens[0].piece !== undefined,
      `${ok.status} ${ok.body.slice(0, 200)}`);
  });
  const grew = rss(pid) - before;
  check('memory: RSS grew little', grew < 150, `${grew.toFixed(0)} MiB`);
  await kase('memory: --requests-ram 503', async () => {
    // two uploads hold 10 MB each of the 24 MiB; a third cannot reserve its body
    const holders = [];
    for (let i = 0; i < 2; i++) {
      const c = await connect();
      c.s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8900000\r\n\r\n{"prompt":"${'a'.repeat(8800000)}`);
      holders.push(c);
    }
    await sleep(1500);
    const r = await exchange(request('/v1/completions', { prompt: 'a'.repeat(5000000) }));
    check('memory: past --requests-ram 503', r.status === 503 && /--requests-ram/.test(r.body) && /retry-after/i.test(r.head),
      `${r.status} ${r.body.slice(0, 300)}`);
    for (const c of holders) c.s.destroy();
    await sleep(300);
    const after = await exchange(request('/v1/completions', { prompt: 'In the beginning', max_tokens: 1 }));
    check('memory: served again once they leave', after.status === 200, after.head + after.body);
  });
} else if (what === 'http') {
  const body = { prompt: 'In the beginning', max_tokens: 4, temperature: 0 };
  await kase('http: half-closed clients are answered', async () => {
    const r = await exchange(request('/v1/completions', body), { half: true });
    check('http: half-closed client gets its answer', r.status === 200 && JSON.parse(r.body).choices.length === 1, r.head + r.body);
    const c = await connect();
    c.s.write(request('/v1/completions', { ...body, stream: true }));
    c.s.end();
    await until(() => c.closed || /data: \[DONE\]/.test(c.data.toString()), 60000);
    c.s.destroy();
    check('http: half-closed stream gets [DONE]', /data: \[DONE\]/.test(c.data.toString()), c.data.toString().slice(0, 300));
  });
  await kase('http: header checks', async () => {
    const two = await exchange(request('/v1/completions', body, 'Content-Length: 3\r\n'));
    check('http: conflicting Content-Length 400', two.status === 400 && /Content-Length/.test(two.body), two.head + two.body);
    const c = await connect();
    c.s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n');
    await until(() => c.closed || parse(c.data).status > 0, 10000);
    const te = parse(c.data);
    c.s.destroy();
    check('http: Transfer-Encoding gzip, chunked 501', te.status === 501 && /Transfer-Encoding/.test(te.body), te.head + te.body);
  });
  await kase('http: an endless chunked body is cut off', async () => {
    const c = await connect();
    c.s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n');
    const chunk = Buffer.from('10000\r\n' + 'x'.repeat(0x10000) + '\r\n');
    let sent = 0;
    const t0 = Date.now();
    while (!c.closed && !c.error && parse(c.data).status === 0 && Date.now() - t0 < 20000 && sent < (1 << 30)) {
      if (!c.s.write(chunk)) await new Promise((r) => { c.s.once('drain', r); setTimeout(r, 50); });
      else await new Promise((r) => setImmediate(r)); /* read while writing, as a real client does */
      sent += chunk.length;
    }
    await until(() => parse(c.data).status > 0 || c.closed, 5000);
    const r = parse(c.data);
    c.s.destroy();
    check('http: 413 and closed well before the upload ends', r.status === 413 && sent < (64 << 20), `${r.status} after ${sent} bytes`);
  });
  await kase('http: ids and max_tokens', async () => {
    const d = await exchange(request('/detokenize', { tokens: [5, 999999] }));
    check('http: /detokenize out of the vocabulary 400', d.status === 400 && /tokens\[1\]' is 999999/.test(d.body), d.body);
    const m = await exchange(request('/v1/completions', { prompt: 'x', max_tokens: 2 ** 30 }));
    check('http: max_tokens 2^30 400', m.status === 400 && /'max_tokens' is 1073741824 .* at most \d+ tokens/.test(m.body) &&
      JSON.parse(m.body).error.param === 'max_tokens', m.body);
  });
}
done();
