// tests/server/get.mjs URL [KEY]: GET (or, with BODY set in the environment, POST) and
// print the status on the first line, then the body (the shell tests need no curl).
const [url, key] = process.argv.slice(2);
const init = { headers: key ? { Authorization: 'Bearer ' + key } : {} };
if (process.env.BODY) Object.assign(init, { method: 'POST', body: process.env.BODY });
try {
  const r = await fetch(url, init);
  console.log(r.status);
  console.log(await r.text());
} catch (e) {
  console.log(0);
  console.log(String(e));
}
