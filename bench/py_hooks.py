#!/usr/bin/python3
"""py_hooks.py — what a Python hook costs: one forward with N identity hooks
(fn(act, hook) returning None) in mechprobe's Python module, the same forward
with N Lua hooks in a mechprobe script, and the same forward in PyTorch with
TransformerLens-style HookPoints (an identity nn.Module per point, the hook a
forward hook on it, as TransformerLens's HookPoint.add_hook registers it) on the
SAME llama2.c weights, tokens and threads. Prints, per runtime and hook count,
the fastest forward time of --reps runs and the overhead per hook call in
microseconds: (time with hooks - time without) / hook calls.

usage: bench/py_hooks.py [--build build] [--model M.bin] [--T 128] [--reps 15]
                         [--threads N]
Without --model, a random Llama (d 512, 8 layers: bench_forward's make-random) is
made in a temporary folder. Needs Debian's python3-torch and python3-numpy, and
the module built (build/python) — /usr/bin/python3.

Hook sets, per layer: 'resid_post' (1 point), 'nine' (hook_resid_pre, attn.hook_q,
hook_k, hook_v, hook_pattern, hook_z, hook_resid_mid, mlp.hook_post,
hook_resid_post). The PyTorch model computes attention as TransformerLens does
(an explicit pattern, so hook_pattern has something to hook), also without hooks.
"""
import argparse, os, subprocess, sys, tempfile, time
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
POINTS = {'resid_post': ['hook_resid_post'],
          'nine': ['hook_resid_pre', 'attn.hook_q', 'attn.hook_k', 'attn.hook_v', 'attn.hook_pattern',
                   'attn.hook_z', 'hook_resid_mid', 'mlp.hook_post', 'hook_resid_post']}

LUA = r'''
local path, tokfile, names, reps = arg[1], arg[2], arg[3], tonumber(arg[4])
local m = mp.load(path)
local f = assert(io.open(tokfile, "rb")); local raw = f:read("a"); f:close()
local tok = {}
for i = 1, #raw // 4 do tok[i] = string.unpack("<i4", raw, 4 * i - 3) end
local hooks = {}
local id = function(act, hook) end
for name in names:gmatch("[^,]+") do hooks[#hooks + 1] = {name, id} end
local opts = {fwd_hooks = hooks}
m:run_with_hooks({tok}, opts)            -- warm-up
local times = {}
for r = 1, reps do
  local t0 = mp.clock()
  m:run_with_hooks({tok}, opts)
  times[r] = mp.clock() - t0
end
table.sort(times)
print(string.format("median_s=%.9f", times[1]))   -- the fastest run, as the Python side takes
'''


def median_time(fn, reps):
    """The fastest of reps runs (after one warm-up): the least disturbed by other
    load, which is what a per-hook difference of a few microseconds needs."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.min(ts))


def names_for(kind, L):
    if kind == 'none':
        return []
    return [f'blocks.{l}.{p}' for l in range(L) for p in POINTS[kind]]


def bench_python(a, tok, L):
    import mechprobe
    m = mechprobe.load(a.model)
    out = {}
    ident = lambda act, hook: None  # noqa: E731
    for kind in ('none', 'resid_post', 'nine'):
        hooks = [(n, ident) for n in names_for(kind, L)]
        out[kind] = median_time(lambda: m.run_with_hooks(tok, fwd_hooks=hooks), a.reps)
    return out


def bench_lua(a, tok_path, L):
    out = {}
    with tempfile.NamedTemporaryFile('w', suffix='.lua', delete=False) as f:
        f.write(LUA)
        script = f.name
    try:
        for kind in ('none', 'resid_post', 'nine'):
            r = subprocess.run([os.path.join(a.build, 'mechprobe'), script, a.model, tok_path,
                                ','.join(names_for(kind, L)) or ',', str(a.reps)],
                               capture_output=True, text=True, check=True)
            out[kind] = float(r.stdout.split('median_s=')[1].split()[0])
    finally:
        os.unlink(script)
    return out


def bench_torch(a, tok, L):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    from peer_torch import load_llama2c, rope_tables, rope, rmsnorm

    class HookPoint(nn.Module):  # TransformerLens's: identity, hooks are forward hooks
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            return x

        def add_hook(self, fn):
            def full(module, inp, out):
                return fn(out, hook=module)
            return self.register_forward_hook(full)

    cfg, w = load_llama2c(a.model)
    hp = nn.ModuleDict({str(l): nn.ModuleDict({p.replace('.', '_'): HookPoint(f'blocks.{l}.{p}')
                                               for p in POINTS['nine']}) for l in range(L)})
    nh, nkv, hs = cfg['n_head'], cfg['n_kv_head'], cfg['d_head']
    B, T = tok.shape
    cos, sin = rope_tables(T, hs)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    x_tok = torch.from_numpy(tok.astype(np.int64))

    def forward():
        x = F.embedding(x_tok, w['emb'])
        for l in range(L):
            h = hp[str(l)]
            x = h['hook_resid_pre'](x)
            n = rmsnorm(x, w['rms_att'][l])
            q = h['attn_hook_q'](rope(F.linear(n, w['wq'][l]).view(B, T, nh, hs), cos, sin))
            k = h['attn_hook_k'](rope(F.linear(n, w['wk'][l]).view(B, T, nkv, hs), cos, sin))
            v = h['attn_hook_v'](F.linear(n, w['wv'][l]).view(B, T, nkv, hs))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if nkv != nh:
                k = k.repeat_interleave(nh // nkv, dim=1)
                v = v.repeat_interleave(nh // nkv, dim=1)
            sc = (q @ k.transpose(-1, -2)) / hs ** 0.5
            pat = h['attn_hook_pattern'](torch.softmax(sc.masked_fill(mask, float('-inf')), -1))
            z = h['attn_hook_z']((pat @ v).transpose(1, 2))
            x = h['hook_resid_mid'](x + F.linear(z.reshape(B, T, nh * hs), w['wo'][l]))
            n = rmsnorm(x, w['rms_ffn'][l])
            post = h['mlp_hook_post'](F.silu(F.linear(n, w['w1'][l])) * F.linear(n, w['w3'][l]))
            x = h['hook_resid_post'](x + F.linear(post, w['w2'][l]))
        return F.linear(rmsnorm(x, w['rms_final']), w['wcls'])

    out = {}
    ident = lambda act, hook: None  # noqa: E731
    with torch.inference_mode():
        for kind in ('none', 'resid_post', 'nine'):
            handles = [hp[str(l)][p.replace('.', '_')].add_hook(ident)
                       for l in range(L) for p in (POINTS[kind] if kind != 'none' else [])]
            out[kind] = median_time(forward, a.reps)
            for hd in handles:
                hd.remove()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build')
    ap.add_argument('--model')
    ap.add_argument('--T', type=int, default=128)
    ap.add_argument('--reps', type=int, default=15)
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    a = ap.parse_args()
    os.environ['OMP_NUM_THREADS'] = str(a.threads)
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), 'python'))
    tmp = tempfile.mkdtemp(prefix='mp_pyhooks.')
    if not a.model:
        a.model = os.path.join(tmp, 'r512.bin')
        subprocess.run([os.path.join(a.build, 'bench', 'bench_forward'), '--mode', 'make-random', '--out', a.model],
                       check=True, stdout=subprocess.DEVNULL)
    import torch
    torch.set_num_threads(a.threads)
    import mechprobe
    L = mechprobe.load(a.model).config['n_layer']
    V = mechprobe.load(a.model).config['vocab']
    tok = np.random.default_rng(0).integers(1, V, size=(1, a.T)).astype(np.int32)
    tok_path = os.path.join(tmp, 'tok.i32')
    tok.tofile(tok_path)
    res = {'mechprobe (Python)': bench_python(a, tok, L), 'mechprobe (Lua)': bench_lua(a, tok_path, L),
           'PyTorch, TL-style HookPoints': bench_torch(a, tok, L)}
    print(f'model={a.model} layers={L} T={a.T} threads={a.threads} reps={a.reps} torch={torch.__version__}')
    print(f'{"runtime":30s} {"hooks":>6s} {"best ms":>10s} {"µs/hook":>9s}')
    for who, r in res.items():
        for kind in ('none', 'resid_post', 'nine'):
            n = len(names_for(kind, L))
            per = (r[kind] - r['none']) / n * 1e6 if n else float('nan')
            print(f'{who:30s} {n:6d} {r[kind] * 1e3:10.2f} {per:9.1f}')
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == '__main__':
    main()
