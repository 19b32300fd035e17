// tests/server/e2e.mjs PORT KEY: the openai npm client (a real client nobody here
// wrote) against `celer serve` with models/default: models, chat and completions,
// streaming and not, logprobs, n, stop strings, the prompt cache in usage, errors
// as the client sees them, and 16 concurrent greedy streams that must produce
// exactly the tokens each produces alone.
import { openaiClass, check, kase, done, bad } from './lib.mjs';

const [port, key] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const OpenAI = openaiClass();
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0, timeout: 60000 });
const chat = (content, extra = {}) =>
  client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 24, ...extra });

async function streamText(iter) {
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const c of iter) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta?.role) role = ch.delta.role;
      text += ch.delta?.content ?? ch.text ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks, role };
}

await kase('models.list', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  check('models.list', ids.includes('default'), JSON.stringify(ids));
});

let plain;
await kase('chat non-stream', async () => {
  plain = await chat('Who made the heaven and the earth?');
  const c = plain.choices[0];
  check('chat non-stream', typeof c.message.content === 'string' && c.message.content.length > 0 && c.message.role === 'assistant' &&
    ['stop', 'length'].includes(c.finish_reason) && plain.usage.prompt_tokens > 0 && plain.usage.completion_tokens > 0 &&
    plain.usage.total_tokens === plain.usage.prompt_tokens + plain.usage.completion_tokens && plain.object === 'chat.completion',
    JSON.stringify(plain));
});

await kase('chat stream = non-stream', async () => {
  const s = await streamText(await chat('Who made the heaven and the earth?', { stream: true, stream_options: { include_usage: true } }));
  check('chat stream = non-stream', s.text === plain.choices[0].message.content && s.finish === plain.choices[0].finish_reason &&
    s.role === 'assistant' && s.usage && s.usage.completion_tokens === plain.usage.completion_tokens,
    `stream ${JSON.stringify(s)} vs ${JSON.stringify(plain.choices[0])}`);
  check('usage reports cached tokens', s.usage && s.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(s.usage));
});

await kase('completions', async () => {
  const a = await client.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 20, temperature: 0 });
  const s = await streamText(await client.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 20, temperature: 0, stream: true }));
  check('completion non-stream', a.object === 'text_completion' && a.choices[0].text.length > 0 && a.usage.completion_tokens === 20 &&
    a.choices[0].finish_reason === 'length', JSON.stringify(a));
  check('completion stream = non-stream', s.text === a.choices[0].text && s.finish === 'length', `${JSON.stringify(s.text)} vs ${JSON.stringify(a.choices[0].text)}`);
  const t = a.choices[0].text;
  // a stop string from the middle of the greedy text ends it there, unsent
  const stop = t.slice(6, 10);
  const b = await client.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 20, temperature: 0, stop: [stop] });
  check('stop string', b.choices[0].text === t.slice(0, t.indexOf(stop)) && b.choices[0].finish_reason === 'stop',
    `stop ${JSON.stringify(stop)}: ${JSON.stringify(b.choices[0])} from ${JSON.stringify(t)}`);
  const sb = await streamText(await client.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 20, temperature: 0, stop, stream: true }));
  check('stop string streamed', sb.text === b.choices[0].text && sb.finish === 'stop', JSON.stringify(sb));
  const ids = await client.completions.create({ model: 'default', prompt: [0, 200, 300, 400], max_tokens: 5, temperature: 0 });
  check('token-id prompt', ids.usage.prompt_tokens === 4 && ids.usage.completion_tokens >= 1 && ids.usage.completion_tokens <= 5, JSON.stringify(ids.usage));
});

await kase('logprobs', async () => {
  const r = await chat('In the beginning', { logprobs: true, top_logprobs: 3, max_tokens: 8 });
  const lp = r.choices[0].logprobs?.content || [];
  check('chat logprobs', lp.length === r.usage.completion_tokens && lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3 &&
    e.top_logprobs[0].token === e.token && Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 && Array.isArray(e.bytes)),
    JSON.stringify(lp).slice(0, 400));
  const c = await client.completions.create({ model: 'default', prompt: 'In the beginning', max_tokens: 4, temperature: 0, logprobs: 2 });
  const l = c.choices[0].logprobs;
  check('completion logprobs', l && l.tokens.length === 4 && l.token_logprobs.length === 4 && l.top_logprobs.length === 4 &&
    Object.keys(l.top_logprobs[0]).length >= 1, JSON.stringify(l));
});

await kase('n choices', async () => {
  const r = await chat('Let there be light', { n: 3, temperature: 1.0, seed: 7, max_tokens: 10 });
  const idx = r.choices.map((c) => c.index).sort();
  check('n choices', r.choices.length === 3 && idx.join() === '0,1,2' && r.choices.every((c) => c.message.content.length > 0) &&
    r.usage.completion_tokens === r.choices.length * 10 - 0 || r.choices.some((c) => c.finish_reason === 'stop'), JSON.stringify(r));
  const g = await chat('Let there be light', { n: 2, max_tokens: 10 });
  check('n greedy choices agree', g.choices[0].message.content === g.choices[1].message.content, JSON.stringify(g.choices));
  const s1 = await chat('Let there be light', { temperature: 1.0, seed: 42, max_tokens: 12 });
  const s2 = await chat('Let there be light', { temperature: 1.0, seed: 42, max_tokens: 12 });
  check('seeded sampling repeats', s1.choices[0].message.content === s2.choices[0].message.content, `${s1.choices[0].message.content} / ${s2.choices[0].message.content}`);
});

await kase('errors through the client', async () => {
  try {
    await client.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'hi' }] });
    bad('unknown model', 'no error');
  } catch (e) {
    check('unknown model', e.status === 404 && /does not exist/.test(e.message), `${e.status} ${e.message}`);
  }
  const anon = new OpenAI({ baseURL: base + '/v1', apiKey: 'wrong', maxRetries: 0 });
  try {
    await anon.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'hi' }] });
    bad('wrong key', 'no error');
  } catch (e) {
    check('wrong key', e.status === 401, `${e.status} ${e.message}`);
  }
});

// 16 concurrent greedy streams: each must produce exactly what it produces alone.
await kase('16 concurrent streams', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Verse ${i + 1}: and the ${['lord', 'king', 'people', 'children'][i % 4]} said unto them`);
  const native = (p) => fetch(base + '/completion', {
    method: 'POST', headers: { Authorization: 'Bearer ' + key },
    body: JSON.stringify({ prompt: p, n_predict: 32, temperature: 0, return_tokens: true, cache_prompt: false }),
  }).then((r) => r.json());
  const run = async (p) => streamText(await client.completions.create({ model: 'default', prompt: p, max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true }, cache_prompt: false }));
  const alone = [], aloneTok = [];
  for (const p of prompts) { alone.push(await run(p)); aloneTok.push((await native(p)).tokens); }
  const t0 = Date.now();
  const together = await Promise.all(prompts.map(run));
  const ms = Date.now() - t0;
  const togetherTok = (await Promise.all(prompts.map(native))).map((r) => r.tokens);
  let same = 0, sameTok = 0;
  for (let i = 0; i < 16; i++) {
    if (alone[i].text === together[i].text && alone[i].usage.completion_tokens === together[i].usage.completion_tokens) same++;
    if (JSON.stringify(aloneTok[i]) === JSON.stringify(togetherTok[i]) && aloneTok[i].length > 0) sameTok++;
  }
  check('16 concurrent streams = alone (text)', same === 16, `${same}/16 identical`);
  check('16 concurrent requests = alone (token ids)', sameTok === 16, `${sameTok}/16 identical`);
  console.log(`# 16 streams x 32 tokens together in ${ms} ms`);
});

done();
