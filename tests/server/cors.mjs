// tests/server/cors.mjs PORT KEY ORIGIN: --cors-origin. A preflight (OPTIONS, no key)
// gets 204 with the CORS headers browsers need; answers, streamed ones too, carry
// Access-Control-Allow-Origin. ORIGIN "-" means a server without --cors-origin: OPTIONS
// still answers 204 with Allow, and no answer carries CORS headers.
import { check, done, kase, raw, rawPost } from './lib.mjs';

const [port, key, origin] = [process.argv[2], process.argv[3], process.argv[4]];
const cors = origin !== '-';
const hdr = (head, name) => { const m = head.match(new RegExp(`^${name}: *(.*)$`, 'im')); return m ? m[1].trim() : null; };

await kase('preflight', async () => {
  const r = await raw(port, Buffer.from('OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: ' +
    (cors ? origin : 'http://elsewhere.test') + '\r\nAccess-Control-Request-Method: POST\r\n' +
    'Access-Control-Request-Headers: authorization, content-type\r\nConnection: close\r\n\r\n'));
  check('preflight: 204 with Allow', r.status === 204 && hdr(r.head, 'Allow') === 'POST, OPTIONS', `${r.status} ${r.head}`);
  if (cors) {
    check('preflight: CORS headers', hdr(r.head, 'Access-Control-Allow-Origin') === origin &&
      /POST/.test(hdr(r.head, 'Access-Control-Allow-Methods') || '') &&
      /authorization/i.test(hdr(r.head, 'Access-Control-Allow-Headers') || ''), r.head);
  } else {
    check('preflight: no CORS headers without --cors-origin', hdr(r.head, 'Access-Control-Allow-Origin') === null, r.head);
  }
  const u = await raw(port, Buffer.from('OPTIONS /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'));
  check('preflight of an unknown path: 404', u.status === 404, String(u.status));
});

await kase('answers carry the origin', async () => {
  const auth = key ? { Authorization: 'Bearer ' + key } : {};
  const want = cors ? origin : null;
  const m = await raw(port, Buffer.from('GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'));
  check('GET /v1/models', m.status === 200 && hdr(m.head, 'Access-Control-Allow-Origin') === want, m.head);
  const body = JSON.stringify({ max_tokens: 3, temperature: 0, messages: [{ role: 'user', content: 'And God said' }] });
  const c = await rawPost(port, '/v1/chat/completions', body, auth);
  check('POST chat', c.status === 200 && hdr(c.head, 'Access-Control-Allow-Origin') === want, c.head);
  const st = await rawPost(port, '/v1/chat/completions', JSON.stringify({ ...JSON.parse(body), stream: true }), auth);
  check('POST chat, streamed', st.status === 200 && hdr(st.head, 'Access-Control-Allow-Origin') === want, st.head);
  const e = await rawPost(port, '/v1/chat/completions', '{', auth);
  check('an error answer too', e.status === 400 && hdr(e.head, 'Access-Control-Allow-Origin') === want, e.head);
});
done();
