# tests/cuda/serve_kv.py: the server's admission by free KV blocks on the GPU (the
# device analog of tests/server/kvpool.mjs, which tests/cli_serve_kv.sh runs on the
# CPU), run on the GPU machine from the repository root (python3 only, no node):
#   python3 tests/cuda/serve_kv.py build/celer frac|budget
# MODE frac: --kv-budget 0.5 (the budget reported, blocks
# return after a request); MODE budget: --kv-budget 500000 (one sequence of ~400
# tokens of the llama fixture's bf16 rows on the GPU, not two): five concurrent
# requests all served with their lone tokens, never two at once.
import json, re, subprocess, sys, threading, time, urllib.request
celer, mode = sys.argv[1], sys.argv[2]
budget = '0.5' if mode == 'frac' else '500000'
log = open(f'/tmp/srv-{mode}.log', 'w')
p = subprocess.Popen([celer, 'serve', '--port', '0', '--device', 'cuda', '-m', 'tests/fixtures/models/llama', '--tokenizer',
                      'tests/server/tok512', '-np', '4', '-b', '16', '--no-cache-prompt', '--metrics', '--kv-budget', budget],
                     stdout=log, stderr=subprocess.STDOUT)
port = None
for _ in range(600):
    time.sleep(0.1)
    t = open(f'/tmp/srv-{mode}.log').read()
    m = re.search(r'listening on http://127.0.0.1:(\d+)', t)
    if m and ' ready ' in t: port = m.group(1); break
if not port:
    print('server did not start:', open(f'/tmp/srv-{mode}.log').read()); p.kill(); sys.exit(1)
base = f'http://127.0.0.1:{port}'
def metrics():
    t = urllib.request.urlopen(base + '/metrics').read().decode()
    return {l.split()[0]: float(l.split()[1]) for l in t.splitlines() if l and not l.startswith('#') and len(l.split()) == 2}
def completion(prompt, n):
    b = json.dumps({'prompt': prompt, 'n_predict': n, 'temperature': 0, 'ignore_eos': True, 'return_tokens': True}).encode()
    return json.loads(urllib.request.urlopen(urllib.request.Request(base + '/completion', data=b, method='POST'), timeout=120).read())
ok = True
def check(name, c, info=''):
    global ok
    print(('ok   ' if c else 'FAIL ') + name + ('' if c else ': ' + str(info))); ok &= bool(c)
prompts = [[1, 20 + k, 30 + 2 * k, 40, 50 + k, 60] for k in range(5)]
m0 = metrics(); start = m0['celer_kv_pool_blocks_used']
r = completion(prompts[0], 40); m1 = metrics()
check('a request is served', len(r.get('tokens', [])) == 40, r)
check('its blocks return to the GPU pool', m1['celer_kv_pool_blocks_used'] == start, (m1['celer_kv_pool_blocks_used'], start))
print(f"budget {m1['celer_kv_pool_bytes_budget']:.0f} bytes ({m1['celer_kv_pool_bytes_budget'] / 2**30:.2f} GiB), "
      f"blocks used {m1['celer_kv_pool_blocks_used']:.0f}")
if mode == 'frac':
    free = int(subprocess.run(['nvidia-smi', '--query-gpu=memory.free', '--format=csv,noheader,nounits'], capture_output=True, text=True).stdout.split()[0]) * 2**20
    b = m1['celer_kv_pool_bytes_budget']
    check('the budget is half the free GPU memory (within what the pool itself holds)', 0.4 * free <= b <= 0.6 * (free + 2**30), (b, free))
else:
    alone = [completion(pr, 390)['tokens'] for pr in prompts]
    peak, stop = [0, 0], [False]
    def watch():
        while not stop[0]:
            m = metrics(); peak[0] = max(peak[0], m['celer_slots_busy']); peak[1] = max(peak[1], m['celer_queue_depth']); time.sleep(0.005)
    w = threading.Thread(target=watch); w.start()
    got = [None] * 5
    def run(i): got[i] = completion(prompts[i], 390)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(5)]
    [t.start() for t in ts]; [t.join() for t in ts]
    stop[0] = True; w.join()
    check('every request finished with the tokens it gives alone', all(g and g.get('tokens') == a for g, a in zip(got, alone)), got)
    check('never two sequences at once (admission by GPU blocks)', peak[0] == 1, f'peak busy {peak[0]}, peak queue {peak[1]}')
    check('the blocks return', metrics()['celer_kv_pool_blocks_used'] == start)
p.terminate(); p.wait(timeout=30)
sys.exit(0 if ok else 1)
