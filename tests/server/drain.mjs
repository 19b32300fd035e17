// tests/server/drain.mjs PORT PID: SIGTERM during a stream: the stream still ends
// normally ([DONE], a finish reason), and new requests are refused.
import { check, kase, done } from './lib.mjs';
const [port, pid] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
await kase('SIGTERM drains a stream', async () => {
  const res = await fetch(base + '/v1/completions', { method: 'POST',
    body: JSON.stringify({ prompt: 'And it came to pass', max_tokens: 200, temperature: 0, stream: true }) });
  const reader = res.body.getReader();
  let text = '', signalled = false, after = null;
  for (;;) {
    const { done: d, value } = await reader.read();
    if (d) break;
    text += new TextDecoder().decode(value);
    if (!signalled && text.includes('data: ')) {
      signalled = true;
      process.kill(Number(pid), 'SIGTERM');
      await new Promise((r) => setTimeout(r, 100));
      after = await fetch(base + '/v1/completions', { method: 'POST', body: JSON.stringify({ prompt: 'x', max_tokens: 2 }) })
        .then((r) => r.status).catch(() => 'refused');
    }
  }
  const n = (text.match(/"text"/g) || []).length;
  check('SIGTERM drains a stream', /data: \[DONE\]/.test(text) && /"finish_reason":"(length|stop)"/.test(text),
    `${n} chunks; tail ${JSON.stringify(text.slice(-200))}`);
  check('new requests refused while draining', after === 503 || after === 'refused', String(after));
});
done();
