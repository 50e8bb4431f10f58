#!/usr/bin/python3
"""peer_torch.py — the PyTorch eager CPU peer of bench_forward's prefill: a
straightforward Llama forward (RMSNorm, RoPE on adjacent pairs, causal
attention, SwiGLU) over the SAME llama2.c checkpoint, the SAME tokens and
batch/T, with the same thread count, under torch.inference_mode().

usage: peer_torch.py MODEL.bin PREFIX -B N [--threads N] [--reps R] [--warmup W]
  PREFIX.tokens.i32   int32 [B,T] written by `bench_forward --mode forward --dump PREFIX`
  PREFIX.logits.f32   float32 [B,T,V] mechprobe's logits on those tokens
Prints key=value lines (bench/run.sh reads them): timings, GFLOP/s (same
analytical count as bench_forward), peak RSS, and logits_maxdiff, the largest
|torch - mechprobe| logit, so we know both run the same computation.

Attention: F.scaled_dot_product_attention(is_causal=True) when this torch has
it (>= 2.0); Debian's torch 1.13 only has the private
F._scaled_dot_product_attention(..., is_causal=True), used then; failing both, an
explicit masked softmax. `attention=` says which ran.
Needs Debian's python3-torch and python3-numpy (/usr/bin/python3).
"""
import argparse, os, resource, struct, sys, time
import numpy as np
import torch
import torch.nn.functional as F


def load_llama2c(path):
    """llama2.c v0 (legacy) or v1 ("ak42") checkpoint -> (cfg, weights)."""
    raw = open(path, 'rb').read()
    magic, = struct.unpack('<I', raw[:4])
    if magic == 0x616b3432:
        ver, = struct.unpack('<i', raw[4:8])
        if ver != 1:
            sys.exit(f'{path}: llama2.c version {ver} is not float32')
        dim, hid, nl, nh, nkv, vocab, seq = struct.unpack('<7i', raw[8:36])
        shared, off, v1 = raw[36] == 1, 256, True
    else:
        dim, hid, nl, nh, nkv, vocab, seq = struct.unpack('<7i', raw[:28])
        shared, vocab, off, v1 = vocab > 0, abs(vocab), 28, False
    hs = dim // nh
    f = np.frombuffer(raw, dtype='<f4', offset=off)
    o = 0

    def take(*shape):
        nonlocal o
        n = int(np.prod(shape))
        t = torch.from_numpy(f[o:o + n].reshape(shape).copy())
        o += n
        return t
    w = {}
    shapes = dict(emb=(vocab, dim), rms_att=(nl, dim), wq=(nl, nh * hs, dim), wk=(nl, nkv * hs, dim),
                  wv=(nl, nkv * hs, dim), wo=(nl, dim, nh * hs), rms_ffn=(nl, dim), w1=(nl, hid, dim),
                  w2=(nl, dim, hid), w3=(nl, hid, dim), rms_final=(dim,))
    order = (('rms_att', 'rms_ffn', 'rms_final', 'emb', 'wq', 'wk', 'wv', 'wo', 'w1', 'w2', 'w3') if v1 else
             ('emb', 'rms_att', 'wq', 'wk', 'wv', 'wo', 'rms_ffn', 'w1', 'w2', 'w3', 'rms_final'))
    for k in order:
        w[k] = take(*shapes[k])
    if not v1:
        o += seq * hs  # legacy freq_cis tables (cos and sin, [seq, hs/2] each)
    w['wcls'] = w['emb'] if shared else take(vocab, dim)
    if o != f.size:
        sys.exit(f'{path}: size mismatch: {f.size - o} unexpected floats')
    cfg = dict(d_model=dim, d_mlp=hid, n_layer=nl, n_head=nh, n_kv_head=nkv, vocab=vocab, ctx=seq,
               d_head=hs, tied=shared)
    return cfg, w


def rope_tables(T, hs, theta=10000.0):
    i = torch.arange(0, hs, 2, dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * (1.0 / theta ** (i / hs))[None, :]
    return torch.cos(ang).float()[:, None, :], torch.sin(ang).float()[:, None, :]  # [T,1,hs/2]


def rope(x, c, s):
    # x [B,T,H,hs]; adjacent pairs (2i, 2i+1) as llama2.c
    xp = x.unflatten(-1, (-1, 2))
    x0, x1 = xp[..., 0], xp[..., 1]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)


def rmsnorm(x, g, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def pick_attention():
    if hasattr(F, 'scaled_dot_product_attention'):
        return 'F.scaled_dot_product_attention(is_causal=True)', \
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if hasattr(F, '_scaled_dot_product_attention'):
        return 'F._scaled_dot_product_attention(is_causal=True) (torch %s)' % torch.__version__, \
            lambda q, k, v: F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]

    def explicit(q, k, v):
        T = q.shape[-2]
        sc = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        sc = sc.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
        return torch.softmax(sc, -1) @ v
    return 'explicit masked softmax', explicit


def block(cfg, w, l, x, cos, sin, attn, eps=1e-5):
    """Layer l of the Llama on the residual stream x [B, T, D]: its hook_resid_post
    (bench/peer_dataset.py hooks it as an nn.Module)."""
    B, T = x.shape[0], x.shape[1]
    nh, nkv, hs = cfg['n_head'], cfg['n_kv_head'], cfg['d_head']
    h = rmsnorm(x, w['rms_att'][l], eps)
    q = rope(F.linear(h, w['wq'][l]).view(B, T, nh, hs), cos, sin).transpose(1, 2)
    k = rope(F.linear(h, w['wk'][l]).view(B, T, nkv, hs), cos, sin).transpose(1, 2)
    v = F.linear(h, w['wv'][l]).view(B, T, nkv, hs).transpose(1, 2)
    if nkv != nh:
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
    z = attn(q, k, v).transpose(1, 2).reshape(B, T, nh * hs)
    x = x + F.linear(z, w['wo'][l])
    h = rmsnorm(x, w['rms_ffn'][l], eps)
    return x + F.linear(F.silu(F.linear(h, w['w1'][l])) * F.linear(h, w['w3'][l]), w['w2'][l])


def forward(cfg, w, tok, cos, sin, attn):
    x = F.embedding(tok, w['emb'])
    for l in range(cfg['n_layer']):
        x = block(cfg, w, l, x, cos, sin, attn)
    return F.linear(rmsnorm(x, w['rms_final']), w['wcls'])


def flops(cfg, B, T):
    D, HD, KD = cfg['d_model'], cfg['n_head'] * cfg['d_head'], cfg['n_kv_head'] * cfg['d_head']
    M, V, L = cfg['d_mlp'], cfg['vocab'], cfg['n_layer']
    mm = 2.0 * B * T * (L * (D * HD + 2 * D * KD + HD * D + 3 * D * M) + D * V)
    return mm + B * L * 2.0 * 2.0 * HD * T * (T + 1) / 2.0


def cpu_probe():
    """(wall, machine busy CPU s, our CPU s): see bench_forward's other_cores."""
    try:
        v = [int(x) for x in open('/proc/stat').readline().split()[1:9]]
        busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf('SC_CLK_TCK')
    except (OSError, ValueError, IndexError):
        busy = None
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), busy, ru.ru_utime + ru.ru_stime


def other_cores(a):
    b = cpu_probe()
    if a[1] is None or b[1] is None or b[0] <= a[0]:
        return None
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('model')
    ap.add_argument('prefix')
    ap.add_argument('-B', type=int, required=True, help='batch (the tokens file is [B,T])')
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--warmup', type=int, default=1, help='untimed runs (>= 1: the first is checked)')
    a = ap.parse_args()
    if a.B < 1 or a.reps < 1 or a.warmup < 1:
        sys.exit('peer_torch.py: -B and --reps must be positive, --warmup at least 1')
    torch.set_num_threads(a.threads)
    cfg, w = load_llama2c(a.model)
    tok_np = np.fromfile(a.prefix + '.tokens.i32', dtype='<i4')
    ref = np.fromfile(a.prefix + '.logits.f32', dtype='<f4')
    V = cfg['vocab']
    T_B = tok_np.size
    if ref.size != T_B * V:
        sys.exit(f'{a.prefix}: {ref.size} logits for {T_B} tokens x vocab {V}')
    B = a.B
    if T_B % B:
        sys.exit(f'{a.prefix}: {T_B} tokens is not a multiple of B={B}')
    T = T_B // B
    tok = torch.from_numpy(tok_np.astype(np.int64)).view(B, T)
    name, attn = pick_attention()
    print(f'torch={torch.__version__}')
    print(f'threads={torch.get_num_threads()}')
    print(f'attention={name}')
    print(f'B={B}\nT={T}\nreps={a.reps}\nwarmup={a.warmup}')
    with torch.inference_mode():
        cos, sin = rope_tables(T, cfg['d_head'])
        for _ in range(a.warmup):
            out = forward(cfg, w, tok, cos, sin, attn)
        diff = (out - torch.from_numpy(ref).view(B, T, V)).abs().max().item()
        times = []
        probe = cpu_probe()
        for _ in range(a.reps):
            t0 = time.perf_counter()
            forward(cfg, w, tok, cos, sin, attn)
            times.append(time.perf_counter() - t0)
    other = other_cores(probe)
    times.sort()
    med = float(np.median(times))
    if other is not None:
        print(f'other_cores={other:.2f}')
    print(f'logits_maxdiff={diff:.3g}')
    print(f'logits_maxabs={float(np.abs(ref).max()):.3g}')
    print(f'median_s={med:.6f}\nmin_s={times[0]:.6f}\nmax_s={times[-1]:.6f}')
    print(f'tok_s={B * T / med:.1f}\ngflops={flops(cfg, B, T) / med * 1e-9:.2f}')
    print(f'maxrss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}')


if __name__ == '__main__':
    main()
