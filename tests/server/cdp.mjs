// tests/server/cdp.mjs: a headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on the browser's fd 3, answers and events on its
// fd 4, each a JSON message ending in a NUL byte), so the page tests need no npm
// package and no WebSocket. Every wait is bounded.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Browser {
  // Starts the browser (BIN: /usr/bin/chromium) and attaches to one page.
  static async launch(bin) {
    const b = new Browser();
    b.profile = fs.mkdtempSync(path.join(os.tmpdir(), 'celer-chromium-'));
    b.proc = spawn(bin, ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--remote-debugging-pipe', '--no-first-run', '--no-default-browser-check', '--disable-extensions',
      '--disable-background-networking', '--disable-sync', '--mute-audio', '--window-size=1200,800',
      `--user-data-dir=${b.profile}`, 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    b.stderr = '';
    b.proc.stderr.on('data', (d) => { b.stderr = (b.stderr + d).slice(-4000); });
    b.next = 1;
    b.waiting = new Map();
    b.listeners = [];
    let buf = Buffer.alloc(0);
    b.proc.stdio[4].on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      let i;
      while ((i = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, i).toString('utf8'));
        buf = buf.subarray(i + 1);
        if (msg.id && b.waiting.has(msg.id)) {
          const w = b.waiting.get(msg.id);
          b.waiting.delete(msg.id);
          msg.error ? w.reject(new Error(`${w.method}: ${JSON.stringify(msg.error)}`)) : w.resolve(msg.result);
        } else if (msg.method) {
          for (const l of b.listeners) l(msg);
        }
      }
    });
    b.exited = new Promise((r) => b.proc.on('exit', r));
    b.exited.then(() => { for (const w of b.waiting.values()) w.reject(new Error('chromium exited: ' + b.stderr)); });
    const { targetId } = await b.send('Target.createTarget', { url: 'about:blank' }, null);
    b.session = (await b.send('Target.attachToTarget', { targetId, flatten: true }, null)).sessionId;
    return b;
  }

  // A DevTools command (on the page's session unless sessionId is null), bounded.
  send(method, params = {}, sessionId = this.session, timeoutMs = 30000) {
    const id = this.next++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => { this.waiting.delete(id); reject(new Error(`${method} timed out`)); }, timeoutMs);
      this.waiting.set(id, { method, resolve: (v) => { clearTimeout(t); resolve(v); }, reject: (e) => { clearTimeout(t); reject(e); } });
      this.proc.stdio[3].write(JSON.stringify(msg) + '\0');
    });
  }

  on(fn) { this.listeners.push(fn); }

  // Resolves with the first event named METHOD that PRED accepts (bounded).
  event(method, pred = () => true, timeoutMs = 30000) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no ${method} event`)), timeoutMs);
      const l = (m) => {
        if (m.method === method && pred(m.params)) {
          clearTimeout(t);
          this.listeners = this.listeners.filter((x) => x !== l);
          resolve(m.params);
        }
      };
      this.on(l);
    });
  }

  // The value of a JavaScript expression in the page (promises awaited).
  async eval(expression) {
    const r = await this.send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`${expression}: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
    return r.result.value;
  }

  // Polls EXPR until it is truthy; returns its value, or throws naming WHAT.
  async waitFor(expr, what, timeoutMs = 60000) {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const v = await this.eval(expr);
      if (v) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  }

  async navigate(url) {
    const loaded = this.event('Page.loadEventFired');
    await this.send('Page.navigate', { url });
    await loaded;
  }

  // A real mouse click in the middle of the element SELECTOR.
  async click(selector) {
    const box = await this.eval(`(() => { const r = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect();
      return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; })()`);
    for (const type of ['mousePressed', 'mouseReleased'])
      await this.send('Input.dispatchMouseEvent', { type, x: box.x, y: box.y, button: 'left', clickCount: 1 });
  }

  // Focuses SELECTOR, empties it and types TEXT into it.
  async type(selector, text) {
    await this.eval(`(() => { const e = document.querySelector(${JSON.stringify(selector)}); e.focus(); e.value = ''; })()`);
    await this.send('Input.insertText', { text });
  }

  async press(key, code = key, keyCode = 13) {
    for (const type of ['keyDown', 'keyUp'])
      await this.send('Input.dispatchKeyEvent', { type, key, code, windowsVirtualKeyCode: keyCode, text: type === 'keyDown' && key === 'Enter' ? '\r' : undefined });
  }

  async screenshot(file) {
    const { data } = await this.send('Page.captureScreenshot', { format: 'png' });
    fs.writeFileSync(file, Buffer.from(data, 'base64'));
  }

  async close() {
    try { await this.send('Browser.close', {}, null, 5000); } catch (e) { /* it may be gone */ }
    const t = setTimeout(() => this.proc.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(t);
    fs.rmSync(this.profile, { recursive: true, force: true });
  }
}
