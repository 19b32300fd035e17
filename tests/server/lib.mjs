// tests/server/lib.mjs: helpers the server tests share: the openai client from the
// npm prefix the test setup installed (NPM_DIR), ok/FAIL lines that tests/cli_serve.sh
// counts, raw HTTP requests, and bounded polling.
import { createRequire } from 'node:module';
import net from 'node:net';

export function openaiClass() {
  const require = createRequire(process.env.NPM_DIR + '/');
  const mod = require('openai');
  return mod.OpenAI || mod.default || mod;
}

let failed = 0;
export function ok(name) { console.log(`ok   ${name}`); }
export function bad(name, detail) { failed++; console.log(`FAIL ${name}: ${detail}`); }
export function check(name, cond, detail) { cond ? ok(name) : bad(name, detail); }
export function failures() { return failed; }

// Runs a named case; an exception is a failure, never a crash of the script.
export async function kase(name, fn) {
  try { await fn(); } catch (e) { bad(name, (e && e.stack) || e); }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Sends raw bytes and returns {status, headers, body} (the connection is closed after).
export function raw(port, bytes, timeoutMs = 120000) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    const t = setTimeout(() => { sock.destroy(); reject(new Error('raw request timed out')); }, timeoutMs);
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', (e) => { clearTimeout(t); reject(e); });
    sock.on('close', () => {
      clearTimeout(t);
      let text = Buffer.concat(chunks).toString('latin1');
      // interim responses (a 100 Continue, which the server may send to a client that
      // half-closed) come before the answer
      while (/^HTTP\/1\.1 1\d\d /.test(text) && text.indexOf('\r\n\r\n') >= 0) text = text.slice(text.indexOf('\r\n\r\n') + 4);
      const m = /^HTTP\/1\.[01] (\d+)/.exec(text);
      const i = text.indexOf('\r\n\r\n');
      let body = i >= 0 ? text.slice(i + 4) : '';
      if (/transfer-encoding: chunked/i.test(text.slice(0, i))) {
        let out = '', p = 0;
        for (;;) {
          const e = body.indexOf('\r\n', p);
          if (e < 0) break;
          const n = parseInt(body.slice(p, e), 16);
          if (!n) break;
          out += body.slice(e + 2, e + 2 + n);
          p = e + 2 + n + 2;
        }
        body = out;
      }
      resolve({ status: m ? +m[1] : 0, head: i >= 0 ? text.slice(0, i) : text, body: Buffer.from(body, 'latin1').toString('utf8') });
    });
    sock.write(bytes);
  });
}

// A request with a body (Buffer or string) and Connection: close.
export function rawPost(port, path, body, headers = {}) {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  let h = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\nConnection: close\r\n`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  return raw(port, Buffer.concat([Buffer.from(h + '\r\n'), b]));
}

export async function metrics(base, key) {
  const r = await fetch(base + '/metrics', { headers: key ? { Authorization: 'Bearer ' + key } : {} });
  const text = await r.text();
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

// Polls fn until it returns true, at most ms milliseconds.
export async function until(fn, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await fn()) return true;
    await sleep(25);
  }
  return false;
}

export function done() {
  console.log(`node: ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
