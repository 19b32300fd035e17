// tests/server/model_name.mjs PORT ID: without --strict-model, any "model" a client
// sends (a fixed name such as gpt-4o, or "default" after -a) gets the loaded model,
// and the response names the model that answered (ID). The main server of
// cli_serve.sh runs with --strict-model, where bad.mjs and e2e.mjs expect 404.
import { check, done, kase, rawPost } from './lib.mjs';

const [port, id] = [process.argv[2], process.argv[3]];
for (const name of ['gpt-4o', 'default', id]) {
  await kase(`model "${name}" is served`, async () => {
    const body = JSON.stringify({ model: name, max_tokens: 4, temperature: 0,
                                  messages: [{ role: 'user', content: 'And God said' }] });
    const r = await rawPost(port, '/v1/chat/completions', body);
    let j = {};
    try { j = JSON.parse(r.body); } catch { /* checked below */ }
    check(`model "${name}": 200 naming ${id}`, r.status === 200 && j.model === id && j.choices?.length === 1,
          `${r.status} ${r.body.slice(0, 200)}`);
  });
}
const r = await rawPost(port, '/v1/completions', JSON.stringify({ model: 'text-davinci-003', prompt: 'In the', max_tokens: 2 }));
check('completions: any model name', r.status === 200 && JSON.parse(r.body).model === id, `${r.status} ${r.body.slice(0, 200)}`);
done();
