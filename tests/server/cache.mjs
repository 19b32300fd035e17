// tests/server/cache.mjs PORT: the second turn of a conversation reuses the prompt
// cache on a sliding-window fixture (gemma3, gpt_oss with tests/server/tok512): exact
// cached token counts, greedy tokens identical to a cold run; the same through the
// openai client's chat API (cached_tokens in usage); and a client that disconnects
// mid-stream frees its slot at once.
import { openaiClass, check, kase, done, metrics, until } from './lib.mjs';

const [port] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const post = (path, body) => fetch(base + path, { method: 'POST', body: JSON.stringify(body) }).then((r) => r.json());
const completion = (prompt, extra = {}) => post('/completion', { prompt, n_predict: 12, temperature: 0, ignore_eos: true, return_tokens: true, ...extra });

await kase('second turn (token ids)', async () => {
  const P = [1, ...Array.from({ length: 23 }, (_, i) => 8 + ((i * 37 + 11) % 256))]; // longer than the window (16)
  const t1 = await completion(P);
  const G = t1.tokens;
  const Q = [8 + 65, 8 + 66, 8 + 67, 8 + 10, 8 + 32];
  const turn2 = [...P, ...G, ...Q];
  const warm = await completion(turn2);
  const cold = await completion(turn2, { cache_prompt: false });
  check('turn 1 generated', G.length === 12, JSON.stringify(t1));
  check('turn 2 cached tokens', warm.tokens_cached === P.length + G.length - 1, `cached ${warm.tokens_cached}, want ${P.length + G.length - 1}`);
  check('turn 2 = cold run', JSON.stringify(warm.tokens) === JSON.stringify(cold.tokens) && cold.tokens_cached === 0,
    `${JSON.stringify(warm.tokens)} vs ${JSON.stringify(cold.tokens)} (cold cached ${cold.tokens_cached})`);
  const again = await completion(turn2);
  check('same prompt again: full hit', again.tokens_cached === turn2.length && JSON.stringify(again.tokens) === JSON.stringify(cold.tokens),
    `cached ${again.tokens_cached} of ${turn2.length}`);
});

await kase('second turn (chat through the openai client)', async () => {
  const OpenAI = openaiClass();
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0 });
  const msgs = [{ role: 'user', content: 'In the beginning God created the heaven and the earth.' }];
  const model = (await client.models.list()).data[0].id;
  const a = await client.chat.completions.create({ model: 'x', messages: msgs, max_tokens: 16, temperature: 0 }).catch((e) => e);
  check('another model name gets this model (no --strict-model)', a.model === model, `${a.status} ${a.model}`);
  const r1 = await client.chat.completions.create({ model, messages: msgs, max_tokens: 16, temperature: 0 });
  const msgs2 = [...msgs, { role: 'assistant', content: r1.choices[0].message.content }, { role: 'user', content: 'And the earth was without form.' }];
  const warm = await client.chat.completions.create({ model, messages: msgs2, max_tokens: 16, temperature: 0 });
  const cold = await client.chat.completions.create({ model, messages: msgs2, max_tokens: 16, temperature: 0, cache_prompt: false });
  check('chat turn 2 cached tokens', warm.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens,
    `${JSON.stringify(warm.usage)} (turn 1 prompt ${r1.usage.prompt_tokens})`);
  check('chat turn 2 = cold run', warm.choices[0].message.content === cold.choices[0].message.content &&
    warm.usage.completion_tokens === cold.usage.completion_tokens && cold.usage.prompt_tokens_details.cached_tokens === 0,
    `${JSON.stringify(warm.choices[0])} vs ${JSON.stringify(cold.choices[0])}`);
});

await kase('disconnect mid-stream frees the slot', async () => {
  const m0 = await metrics(base);
  const ac = new AbortController();
  const res = await fetch(base + '/completion', { method: 'POST', signal: ac.signal,
    body: JSON.stringify({ prompt: [1, 50, 60, 70], n_predict: 3000, ignore_eos: true, stream: true, temperature: 0 }) });
  const reader = res.body.getReader();
  let got = 0;
  while (got < 3) { const { done: d, value } = await reader.read(); if (d) break; got += (new TextDecoder().decode(value).match(/data: /g) || []).length; }
  const busy = (await metrics(base)).celer_slots_busy;
  const t0 = Date.now();
  ac.abort();
  const freed = await until(async () => {
    const m = await metrics(base);
    return m.celer_slots_busy === 0 && m.celer_requests_cancelled_total === m0.celer_requests_cancelled_total + 1;
  }, 10000);
  const m1 = await metrics(base);
  check('disconnect mid-stream frees the slot', got >= 3 && busy === 1 && freed && m1.celer_kv_bytes_in_use === 0,
    `chunks ${got}, busy before ${busy}, freed ${freed} after ${Date.now() - t0} ms, ${JSON.stringify(m1)}`);
  const r = await completion([1, 2, 3]);
  check('serving after the disconnect', r.tokens && r.tokens.length === 12, JSON.stringify(r));
});
done();
