// tests/server/queue.mjs PORT: with one slot and a queue of one, a burst of four long
// requests gets one running, one queued, and 503s with a JSON error for the rest.
import { check, kase, done, rawPost } from './lib.mjs';
const [port] = process.argv.slice(2);
await kase('queue full: 503', async () => {
  const body = JSON.stringify({ prompt: 'And it came to pass', max_tokens: 150, temperature: 0 });
  const rs = await Promise.all([0, 1, 2, 3].map(() => rawPost(port, '/v1/completions', body)));
  const codes = rs.map((r) => r.status).sort();
  const busy = rs.filter((r) => r.status === 503);
  check('queue full: 503', busy.length >= 1 && busy.every((r) => /queue is full/.test(JSON.parse(r.body).error.message)) &&
    rs.filter((r) => r.status === 200).length >= 1 && codes.every((c) => c === 200 || c === 503), codes.join());
});
done();
