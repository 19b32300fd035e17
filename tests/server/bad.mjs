// tests/server/bad.mjs PORT KEY: bad input gets an OpenAI-style JSON error with the
// right status and the server keeps serving: no or wrong bearer key (401), malformed
// JSON, wrong types, invalid UTF-8, a prompt longer than the context (400), an
// unknown model (404), an oversized body with and without Content-Length (413),
// unknown paths (404) and methods (405).
import { check, kase, done, raw, rawPost } from './lib.mjs';

const [port, key] = process.argv.slice(2);
const auth = { Authorization: 'Bearer ' + key };
const chatBody = (extra) => JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0, ...extra });

function isError(r, status, re) {
  try {
    const j = JSON.parse(r.body);
    return r.status === status && typeof j.error?.message === 'string' && typeof j.error?.type === 'string' &&
      (!re || re.test(j.error.message + ' ' + (j.error.code || '') + ' ' + (j.error.param || '')));
  } catch { return false; }
}
async function expectError(name, status, req, re) {
  await kase(name, async () => {
    const r = await req();
    check(name, isError(r, status, re), `${r.status} ${r.body.slice(0, 300)}`);
  });
}

await expectError('no key: 401', 401, () => rawPost(port, '/v1/chat/completions', chatBody()));
await expectError('wrong key: 401', 401, () => rawPost(port, '/v1/chat/completions', chatBody(), { Authorization: 'Bearer nope' }));
await kase('health needs no key', async () => {
  const r = await raw(port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  check('health needs no key', r.status === 200 && JSON.parse(r.body).status === 'ok', r.body);
});
await expectError('malformed JSON: 400', 400, () => rawPost(port, '/v1/chat/completions', '{"messages": [', auth), /malformed JSON/);
await expectError('not an object: 400', 400, () => rawPost(port, '/v1/completions', '[1,2]', auth));
await expectError('temperature type: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ temperature: 'hot' }), auth), /temperature/);
await expectError('messages type: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ messages: 'hi' }), auth), /messages/);
await expectError('message role type: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ messages: [{ role: 5, content: 'x' }] }), auth), /role/);
await expectError('max_tokens range: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ max_tokens: -5 }), auth), /max_tokens/);
await expectError('stream type: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ stream: 'yes' }), auth), /stream/);
await expectError('stop type: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ stop: [1, 2] }), auth), /stop/);
await expectError('n too large: 400', 400, () => rawPost(port, '/v1/chat/completions', chatBody({ n: 1000 }), auth), /'n'/);
await expectError('prompt token out of range: 400', 400, () => rawPost(port, '/v1/completions', JSON.stringify({ prompt: [1, 999999] }), auth), /prompt/);
await expectError('missing prompt: 400', 400, () => rawPost(port, '/v1/completions', JSON.stringify({ max_tokens: 3 }), auth), /prompt/);
await expectError('unknown model: 404', 404, () => rawPost(port, '/v1/chat/completions', chatBody({ model: 'gpt-9' }), auth), /model_not_found/);
await expectError('prompt longer than the context: 400', 400,
  () => rawPost(port, '/v1/completions', JSON.stringify({ prompt: 'and the lord said unto moses '.repeat(200), max_tokens: 4 }), auth),
  /context_length_exceeded/);
await expectError('invalid UTF-8: 400', 400, () => rawPost(port, '/v1/chat/completions',
  Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"a'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]), auth), /UTF-8/);
await expectError('lone surrogate escape: 400', 400, () => rawPost(port, '/v1/chat/completions', '{"messages":[{"role":"user","content":"\\ud800"}]}', auth));
await expectError('oversized body: 413', 413, () => rawPost(port, '/v1/chat/completions', chatBody({ pad: 'x'.repeat(70000) }), auth), /exceeds/);
await kase('oversized chunked body: 413', async () => {
  let req = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;
  const body = chatBody({ pad: 'y'.repeat(70000) });
  for (let i = 0; i < body.length; i += 8192) { const part = body.slice(i, i + 8192); req += part.length.toString(16) + '\r\n' + part + '\r\n'; }
  req += '0\r\n\r\n';
  const r = await raw(port, req);
  check('oversized chunked body: 413', isError(r, 413, /exceeds/), `${r.status} ${r.body.slice(0, 200)}`);
});
await expectError('unknown path: 404', 404, () => rawPost(port, '/v1/nothing', '{}', auth));
await expectError('wrong method: 405', 405, () => raw(port, `GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`));
await kase('tokenize/detokenize', async () => {
  const t = await rawPost(port, '/tokenize', JSON.stringify({ content: 'In the beginning' }), auth);
  const ids = JSON.parse(t.body).tokens;
  const d = await rawPost(port, '/detokenize', JSON.stringify({ tokens: ids }), auth);
  check('tokenize/detokenize', t.status === 200 && ids.length > 0 && JSON.parse(d.body).content === 'In the beginning', t.body + ' ' + d.body);
  const b = await rawPost(port, '/detokenize', JSON.stringify({ tokens: 'x' }), auth);
  check('detokenize bad input: 400', isError(b, 400), b.body);
});
await kase('still serving after bad input', async () => {
  const r = await rawPost(port, '/v1/chat/completions', chatBody(), auth);
  const j = JSON.parse(r.body);
  check('still serving after bad input', r.status === 200 && typeof j.choices[0].message.content === 'string', r.body);
});
done();
