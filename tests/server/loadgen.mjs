// tests/server/loadgen.mjs: a small load generator for `celer serve` (docs/benchmarks/server.md).
//   node tests/server/loadgen.mjs URL CONCURRENCY REQUESTS MAX_TOKENS [PROMPT_WORDS]
// Keeps CONCURRENCY streaming /v1/completions requests in flight (greedy, ignore_eos so
// every request generates MAX_TOKENS) until REQUESTS have finished, and prints one JSON
// line with the keys of loadgen.c: requests/s, output tokens/s, time to first token
// p50/p99, inter-token latency p50/p99/mean over every gap of every stream, and the
// decode rate while every stream decodes (CONCURRENCY / mean inter-token time).
import http from 'node:http';

const [url, conc = '1', total = '8', maxTokens = '64', words = '32'] = process.argv.slice(2);
const u = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(conc) });
const vocab = ['and', 'the', 'lord', 'said', 'unto', 'moses', 'in', 'that', 'day', 'of', 'his', 'people', 'went', 'out'];

function one(i) {
  return new Promise((resolve, reject) => {
    const prompt = Array.from({ length: Number(words) }, (_, k) => vocab[(i * 7 + k * 3) % vocab.length]).join(' ');
    const body = JSON.stringify({ prompt, max_tokens: Number(maxTokens), temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true }, cache_prompt: false });
    const t0 = performance.now();
    let first = 0, last = 0, tokens = 0, buf = '';
    const gaps = [];
    const req = http.request({ host: u.hostname, port: u.port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k); buf = buf.slice(k + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          const j = JSON.parse(ev.slice(6));
          const now = performance.now();
          if (j.choices && j.choices.length) {
            if (!first) first = now; else gaps.push(now - last);
            last = now;
          }
          if (j.usage) tokens = j.usage.completion_tokens;
        }
      });
      res.on('end', () => resolve({ ttft: first - t0, total: performance.now() - t0, tokens, gaps }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : 0; };
const results = [];
let next = 0;
const t0 = performance.now();
await Promise.all(Array.from({ length: Number(conc) }, async () => {
  while (next < Number(total)) { const i = next++; results.push(await one(i)); }
}));
const secs = (performance.now() - t0) / 1000;
const toks = results.reduce((s, r) => s + r.tokens, 0);
const ttft = results.map((r) => r.ttft);
const gaps = results.flatMap((r) => r.gaps);
const itl = gaps.length ? gaps.reduce((a, b) => a + b, 0) / gaps.length : 0; // mean inter-token time (ms)
console.log(JSON.stringify({ concurrency: Number(conc), requests: results.length, prompt_words: Number(words),
  max_tokens: Number(maxTokens), seconds: +secs.toFixed(3), req_per_s: +(results.length / secs).toFixed(3),
  tokens: toks, out_tok_per_s: +(toks / secs).toFixed(1), ttft_p50_ms: +q(ttft, 0.5).toFixed(1), ttft_p99_ms: +q(ttft, 0.99).toFixed(1),
  itl_p50_ms: +q(gaps, 0.5).toFixed(2), itl_p99_ms: +q(gaps, 0.99).toFixed(2), itl_mean_ms: +itl.toFixed(2),
  decode_tok_per_s: +(itl ? Number(conc) * 1000 / itl : 0).toFixed(1), errors: 0 }));
agent.destroy();
