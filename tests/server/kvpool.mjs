// tests/server/kvpool.mjs PORT MODE: the KV block pool seen from the server
// (tests/cli_serve_kv.sh: the llama fixture, -np 4 -b 16 --no-cache-prompt).
// MODE free (no budget): the pool's used-block count returns to its start after a
// finished request and after a client disconnects mid-stream. MODE budget
// (--kv-budget 1000000: one sequence of 400 tokens's blocks and its reserve, not two): five
// concurrent requests all finish with the tokens each gives alone while the server
// never runs two at once (they wait in the queue); a request that outgrows the
// budget fails with a clear error and the server stays up; the count returns.
import { check, kase, done, metrics, until, sleep } from './lib.mjs';

const [port, mode] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const post = (body) => fetch(base + '/completion', { method: 'POST', body: JSON.stringify(body) });
const completion = (prompt, n) => post({ prompt, n_predict: n, temperature: 0, ignore_eos: true, return_tokens: true }).then((r) => r.json());
const prompts = [0, 1, 2, 3, 4].map((k) => [1, 20 + k, 30 + 2 * k, 40, 50 + k, 60]);

const m0 = await metrics(base);
const start = m0.celer_kv_pool_blocks_used;

await kase('blocks return after a request', async () => {
  const r = await completion(prompts[0], 40);
  const m = await metrics(base);
  check('a request is served', r.tokens && r.tokens.length === 40, JSON.stringify(r));
  check('its blocks return to the pool', m.celer_kv_pool_blocks_used === start,
    `${m.celer_kv_pool_blocks_used} blocks in use, ${start} at the start`);
});

if (mode === 'free') await kase('blocks return after a disconnect', async () => {
  const ac = new AbortController();
  const res = await fetch(base + '/completion', { method: 'POST', signal: ac.signal,
    body: JSON.stringify({ prompt: prompts[1], n_predict: 3000, ignore_eos: true, stream: true, temperature: 0 }) });
  const reader = res.body.getReader();
  let got = 0;
  while (got < 3) { const { done: d, value } = await reader.read(); if (d) break; got += (new TextDecoder().decode(value).match(/data: /g) || []).length; }
  const held = (await metrics(base)).celer_kv_pool_blocks_used;
  ac.abort();
  const back = await until(async () => (await metrics(base)).celer_kv_pool_blocks_used === start, 10000);
  check('blocks are held while the stream runs', got >= 3 && held > start, `chunks ${got}, ${held} blocks (start ${start})`);
  check('the disconnected stream\'s blocks return', back, JSON.stringify(await metrics(base)));
});

if (mode === 'budget') await kase('a budget for one sequence: the others wait, all are served', async () => {
  const alone = [];
  for (const p of prompts) alone.push((await completion(p, 390)).tokens);
  let peak = 0, queued = 0, sampling = true;
  const watch = (async () => {
    while (sampling) {
      const m = await metrics(base);
      peak = Math.max(peak, m.celer_slots_busy);
      queued = Math.max(queued, m.celer_queue_depth);
      await sleep(5);
    }
  })();
  const got = await Promise.all(prompts.map((p) => completion(p, 390)));
  sampling = false;
  await watch;
  const same = got.every((r, i) => JSON.stringify(r.tokens) === JSON.stringify(alone[i]));
  check('every request finished with the tokens it gives alone', same,
    got.map((r, i) => `${JSON.stringify(r.tokens)} vs ${JSON.stringify(alone[i])}`).join('; '));
  check('never two sequences at once (admission by blocks)', peak === 1, `peak busy slots ${peak}, peak queue ${queued}`);
  const m = await metrics(base);
  check('blocks return after the burst', m.celer_kv_pool_blocks_used === start, `${m.celer_kv_pool_blocks_used} vs ${start}`);
});

if (mode === 'budget') await kase('a request that outgrows the budget', async () => {
  const r = await post({ prompt: prompts[2], n_predict: 1000, temperature: 0, ignore_eos: true });
  const body = await r.text();
  check('fails with a clear error', r.status >= 500 && /KV cache budget exhausted/.test(body), `${r.status} ${body}`);
  const again = await completion(prompts[3], 40);
  check('the server serves the next one', again.tokens && again.tokens.length === 40, JSON.stringify(again));
  const m = await metrics(base);
  check('blocks return after the failure', m.celer_kv_pool_blocks_used === start, `${m.celer_kv_pool_blocks_used} vs ${start}`);
});
done();
