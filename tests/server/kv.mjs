// tests/server/kv.mjs PORT CELER_BIN MODEL_DIR: /metrics counts the KV bytes the busy
// slot holds exactly as `celer inspect -c TOKENS` does for that many tokens (one figure
// for the whole program: model/registry.c). A server with one slot streams a long
// completion; while it runs, /metrics is read a few times, and each reading's
// celer_kv_tokens_in_use and celer_kv_bytes_in_use (taken from one snapshot of the
// slots) are checked against inspect's "kv at TOKENS" line. The prompt is longer than
// the fixtures' sliding window (16), so rotating caches are capped in both figures.
import { execFileSync } from 'node:child_process';
import { check, kase, done, metrics } from './lib.mjs';

const [port, celer, model] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;

// inspect's figure: "kv at N:     B bytes (...)"
function inspectBytes(tokens) {
  const out = execFileSync(celer, ['inspect', '-m', model, '-c', String(tokens)], { encoding: 'utf8', timeout: 60000 });
  const m = /^kv at (\d+):\s+(\d+) bytes/m.exec(out);
  return m && Number(m[1]) === tokens ? Number(m[2]) : NaN;
}

// Streams one long completion and reads /metrics while the slot is busy; returns the
// readings (tokens > 0 of one busy slot). A stream that ends before any reading (a
// fast machine) yields none, and the caller tries again.
async function readings(want) {
  const ac = new AbortController();
  const prompt = [1, ...Array.from({ length: 23 }, (_, i) => 8 + ((i * 37 + 11) % 256))];
  const res = await fetch(base + '/completion', { method: 'POST', signal: ac.signal,
    body: JSON.stringify({ prompt, n_predict: 4000, ignore_eos: true, stream: true, temperature: 0 }) });
  const reader = res.body.getReader();
  const got = [];
  let ended = false;
  const drain = (async () => { for (;;) { const { done: d } = await reader.read().catch(() => ({ done: true })); if (d) break; } ended = true; })();
  while (!ended && got.length < want) {
    const m = await metrics(base);
    const t = m.celer_kv_tokens_in_use, b = m.celer_kv_bytes_in_use;
    if (m.celer_slots_busy === 1 && t > prompt.length && !got.some((g) => g.tokens === t)) got.push({ tokens: t, bytes: b });
    await new Promise((r) => setTimeout(r, 50));
  }
  ac.abort();
  await drain;
  return got;
}

await kase(`/metrics kv bytes = celer inspect (${model})`, async () => {
  let got = [];
  for (let attempt = 0; attempt < 5 && got.length === 0; attempt++) got = await readings(3);
  check('readings taken while the slot is busy', got.length > 0, 'the stream always ended before /metrics saw it');
  for (const g of got) {
    const want = inspectBytes(g.tokens);
    check(`kv bytes at ${g.tokens} tokens`, g.bytes === want, `/metrics ${g.bytes}, celer inspect -c ${g.tokens}: ${want}`);
  }
});
done();
