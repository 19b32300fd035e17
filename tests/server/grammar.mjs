// tests/server/grammar.mjs PORT: structured output through the openai npm client
// against `celer serve` with models/default (which never writes JSON on its own):
// response_format json_schema and json_object on chat (streaming and not) and
// completions, llama-server's grammar and json_schema on /completion; every answer
// must parse and satisfy the schema (checked here, from the schema's meaning);
// bad schemas and grammars are 400s naming the reason.
import { openaiClass, check, kase, done } from './lib.mjs';

const [port] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const OpenAI = openaiClass();
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 240000 });

const schema = {
  type: 'object',
  properties: {
    book: { enum: ['Genesis', 'Exodus', 'Psalms'] },
    chapter: { type: 'integer' },
    words: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 1, maxItems: 2 },
    meta: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
  },
  required: ['book', 'chapter', 'words', 'meta'],
  additionalProperties: false,
};

// The schema's constraints, checked on the parsed answer.
function satisfies(v) {
  const keys = Object.keys(v);
  return v && typeof v === 'object' && !Array.isArray(v) && keys.every((k) => k in schema.properties) &&
    ['Genesis', 'Exodus', 'Psalms'].includes(v.book) && Number.isInteger(v.chapter) &&
    Array.isArray(v.words) && v.words.length >= 1 && v.words.length <= 2 &&
    v.words.every((w) => typeof w === 'string' && [...w].length <= 8) &&
    v.meta && typeof v.meta === 'object' && typeof v.meta.ok === 'boolean' &&
    Object.keys(v.meta).every((k) => k === 'ok');
}

function parses(text) {
  try { return JSON.parse(text); } catch { return undefined; }
}

const rf = { type: 'json_schema', json_schema: { name: 'verse', schema, strict: true } };

await kase('chat json_schema', async () => {
  const r = await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'A verse as JSON' }],
    response_format: rf, max_tokens: 1500, temperature: 1, seed: 7, n: 3 });
  for (const c of r.choices) {
    const v = parses(c.message.content);
    check(`chat json_schema choice ${c.index}`, c.finish_reason === 'stop' && v !== undefined && satisfies(v), JSON.stringify(c));
  }
});

await kase('chat json_schema stream', async () => {
  const s = await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'Again' }],
    response_format: rf, max_tokens: 1500, temperature: 1, seed: 11, stream: true });
  let text = '', finish = null;
  for await (const c of s) for (const ch of c.choices) { text += ch.delta?.content ?? ''; if (ch.finish_reason) finish = ch.finish_reason; }
  const v = parses(text);
  check('chat json_schema stream', finish === 'stop' && v !== undefined && satisfies(v), `${finish} ${JSON.stringify(text)}`);
});

await kase('completions json_object', async () => {
  // any object: the default model's keys run on, so an empty-ish object is what a grammar
  // that ends can produce; check only what it did produce
  const r = await client.completions.create({ model: 'default', prompt: '{"', max_tokens: 1500, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'boolean' } }, required: ['a'], additionalProperties: false } } } });
  const v = parses(r.choices[0].text);
  check('completions json_schema', r.choices[0].finish_reason === 'stop' && v && typeof v.a === 'boolean' && Object.keys(v).length === 1,
    JSON.stringify(r.choices[0]));
});

async function post(path, body) {
  const r = await fetch(base + path, { method: 'POST', body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

await kase('native grammar and json_schema', async () => {
  const a = await post('/completion', { prompt: 'In the beginning', grammar: 'root ::= ("yes" | "no") "!"', n_predict: 20 });
  check('/completion grammar', a.status === 200 && /^(yes|no)!$/.test(a.body.content), JSON.stringify(a));
  const b = await post('/completion', { prompt: 'In the beginning', json_schema: { type: 'array', items: { type: 'integer' }, maxItems: 3 },
    n_predict: 400, temperature: 0 });
  const v = parses(b.body.content);
  check('/completion json_schema', b.status === 200 && Array.isArray(v) && v.length <= 3 && v.every(Number.isInteger), JSON.stringify(b));
});

await kase('bad input', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', minimum: 3 } } } }, 'response_format', 'unsupported keyword "minimum"'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format', 'schema\' is required'],
    [{ response_format: { type: 'yaml' } }, 'response_format', 'yaml'],
    [{ grammar: 'root ::= foo' }, 'grammar', 'line 1, column 10: undefined rule "foo"'],
    [{ grammar: 'root ::= "a" ' + '("b" '.repeat(200) + ')'.repeat(200) }, 'grammar', 'CELER_MAX_GRAMMAR_NESTING'],
    [{ json_schema: { $ref: '#/$defs/nope' } }, 'json_schema', 'names no definition'],
    [{ grammar: 'root ::= "a"', json_schema: {} }, 'grammar', 'give one of'],
  ];
  for (const [extra, param, msg] of cases) {
    const r = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], ...extra });
    const e = r.body.error || {};
    check(`400 ${msg}`, r.status === 400 && e.param === param && String(e.message).includes(msg), JSON.stringify(r));
  }
});

done();
