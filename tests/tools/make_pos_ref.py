#!/usr/bin/python3
"""make_pos_ref.py — PyTorch reference for mechprobe's positional schemes.

Written independently of the C code, from the definitions in the issue and the
papers: the frequencies of rope (theta^(-2i/Dh)), half_rope (RoPE on the first
rope_dims channels, theta^(-2i/rope_dims), the rest unrotated), high_freq (every
pair, log-spaced from 2*pi/32 to 2*2*pi/ctx), rope_id (that band on the first
rope_dims channels, the rest unrotated, logits of the query at 1-based position
t times (1 + 0.1 ln(max(t, ctx)/ctx))^2), none; and the inference-time scalings
of RoPE: PI (theta_i / s), NTK-aware (base * s^(d/(d-2))), YaRN (Peng et al.
2023: r_i = L0 / lambda_i, gamma = clamp((r - 1)/(32 - 1), 0, 1),
theta_i' = (1 - gamma) theta_i / s + gamma theta_i, logits times
(0.1 ln s + 1)^2). Pairs are adjacent channels (2i, 2i+1) as in mechprobe.

One small RMSNorm / SwiGLU / grouped-query model (float64 weights drawn here)
is run under every scheme on a fixed batch longer than the training length
(T = 20 > 2 ctx = 16), and the logits, the masked mean cross-entropy and its
gradient with respect to every parameter (torch autograd) are stored.

Output tests/data/pos_ref.h5 — a mechprobe checkpoint (DESIGN.md: / attrs,
/config, /params) plus
  /ref/tokens, /ref/targets               int32 [B,T]
  /ref/<scheme>/logits                    float32 [B,T,V]
  /ref/<scheme> attr loss                 float64
  /ref/<scheme>/grad                      float32, every parameter's gradient
                                          concatenated in the order of the
                                          attribute /ref names (comma-separated)
  /ref/<scheme> attrs                     the config overrides of the scheme

Command (from the repository root): /usr/bin/python3 tests/tools/make_pos_ref.py tests/data/pos_ref.h5
"""
import math, sys
import h5py, numpy as np, torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

CFG = dict(d_model=16, n_layer=2, n_head=2, n_kv_head=1, d_head=8, d_mlp=16, vocab=13, ctx=8,
           tied=1, rope_theta=100.0, norm_eps=1e-5)
B, T = 2, 20

# scheme name -> config overrides (the C test test_pos.c has the same table)
SCHEMES = {
    'rope': dict(pos='rope'),
    'none': dict(pos='none'),
    'half_rope': dict(pos='half_rope'),
    'half_rope6': dict(pos='half_rope', rope_dims=6),
    'high_freq': dict(pos='high_freq'),
    'rope_id': dict(pos='rope_id'),
    'rope_id_notemp': dict(pos='rope_id', pos_temp=0),
    'rope_pi': dict(pos='rope', rope_scaling='pi', rope_factor=2.0),
    'rope_ntk': dict(pos='rope', rope_scaling='ntk', rope_factor=4.0),
    'rope_yarn': dict(pos='rope', rope_scaling='yarn', rope_factor=4.0, rope_orig_ctx=256),
}


def freqs(s):
    """Angular frequency per pair (0 = unrotated) and whether the pair rotates."""
    Dh, L = CFG['d_head'], CFG['ctx']
    half = Dh // 2
    pos = s['pos']
    out = np.zeros(half)
    if pos == 'none':
        return out
    if pos in ('half_rope', 'rope_id'):
        d = s.get('rope_dims', 2 * (Dh // 4))
    else:
        d = Dh
    n = d // 2
    if pos in ('high_freq', 'rope_id'):
        hi, lo = 2 * math.pi / 32, 2 * 2 * math.pi / L
        for i in range(n):
            out[i] = hi if n == 1 else math.exp(math.log(hi) + (math.log(lo) - math.log(hi)) * i / (n - 1))
        return out
    base = CFG['rope_theta']
    sc, fac = s.get('rope_scaling'), s.get('rope_factor', 1.0)
    if sc == 'ntk':
        base = base * fac ** (d / (d - 2))
    for i in range(n):
        th = base ** (-2.0 * i / d)
        if sc == 'pi':
            th = th / fac
        elif sc == 'yarn':
            L0 = s.get('rope_orig_ctx', L)
            lam = 2 * math.pi / th           # wavelength
            r = L0 / lam
            g = min(1.0, max(0.0, (r - 1.0) / (32.0 - 1.0)))
            th = (1 - g) * th / fac + g * th
        out[i] = th
    return out


def logit_factor(s, Tn):
    """Per-query factor on the logits [T]."""
    f = torch.ones(Tn)
    L = CFG['ctx']
    if s['pos'] == 'rope_id' and s.get('pos_temp', 1):
        t = torch.arange(1, Tn + 1, dtype=torch.float64)
        f = f * (1 + 0.1 * torch.log(torch.clamp(t, min=L) / L)) ** 2
    if s.get('rope_scaling') == 'yarn' and s['rope_factor'] > 1:
        f = f * (0.1 * math.log(s['rope_factor']) + 1) ** 2
    return f


def rotate(x, fr):  # x [B,T,nh,Dh], adjacent pairs
    Tn = x.shape[1]
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * torch.tensor(fr)[None, :]
    cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(x.shape)


def forward(P, tok, s):
    H, K, Dh, L = CFG['n_head'], CFG['n_kv_head'], CFG['d_head'], CFG['n_layer']
    Bn, Tn = tok.shape
    fr, lf = freqs(s), logit_factor(s, Tn)

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + CFG['norm_eps']) * w
    x = P['embed'][tok]
    mask = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
    for l in range(L):
        b = 'blocks.%d.' % l
        h = rms(x, P[b + 'ln1.weight'])
        q = (h @ P[b + 'attn.wq'].T).view(Bn, Tn, H, Dh)
        k = (h @ P[b + 'attn.wk'].T).view(Bn, Tn, K, Dh)
        v = (h @ P[b + 'attn.wv'].T).view(Bn, Tn, K, Dh)
        if s['pos'] != 'none':
            q, k = rotate(q, fr), rotate(k, fr)
        g = H // K
        kk = k.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
        vv = v.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
        qq = q.permute(0, 2, 1, 3)
        sc = qq @ kk.transpose(-1, -2) / math.sqrt(Dh) * lf[None, None, :, None]
        sc = sc.masked_fill(mask, float('-inf'))
        z = (torch.softmax(sc, dim=-1) @ vv).permute(0, 2, 1, 3).reshape(Bn, Tn, H * Dh)
        x = x + z @ P[b + 'attn.wo'].T
        h2 = rms(x, P[b + 'ln2.weight'])
        x = x + (F.silu(h2 @ P[b + 'mlp.w1'].T) * (h2 @ P[b + 'mlp.w3'].T)) @ P[b + 'mlp.w2'].T
    return rms(x, P['ln_final.weight']) @ P['embed'].T


def main(dst):
    rng = np.random.default_rng(8)
    D, M, V, HD, KD = CFG['d_model'], CFG['d_mlp'], CFG['vocab'], CFG['n_head'] * CFG['d_head'], CFG['n_kv_head'] * CFG['d_head']
    names, shapes = ['embed'], [(V, D)]
    for l in range(CFG['n_layer']):
        b = 'blocks.%d.' % l
        names += [b + 'ln1.weight', b + 'attn.wq', b + 'attn.wk', b + 'attn.wv', b + 'attn.wo', b + 'ln2.weight',
                  b + 'mlp.w1', b + 'mlp.w3', b + 'mlp.w2']
        shapes += [(D,), (HD, D), (KD, D), (KD, D), (D, HD), (D,), (M, D), (M, D), (D, M)]
    names.append('ln_final.weight')
    shapes.append((D,))
    W = {}
    for n, sh in zip(names, shapes):
        W[n] = (1.0 + 0.2 * rng.standard_normal(sh)) if len(sh) == 1 else 0.4 * rng.standard_normal(sh)
        W[n] = W[n].astype(np.float32)   # the C side reads float32: use exactly those values
    toks = rng.integers(0, V, size=(B, T + 1))
    tokens, targets = toks[:, :T].astype(np.int32), toks[:, 1:].astype(np.int32).copy()
    targets[rng.random(targets.shape) < 0.2] = -1
    with h5py.File(dst, 'w', libver='latest') as o:
        o.attrs['format'] = 'mechprobe.checkpoint'
        o.attrs['version'] = 1
        o.attrs['source'] = 'tests/tools/make_pos_ref.py'
        c = o.create_group('config')
        for k, v in CFG.items():
            c.attrs[k] = v
        c.attrs['norm'], c.attrs['mlp'], c.attrs['pos'] = 'rms', 'swiglu', 'rope'
        for n in names:
            o['params/' + n] = W[n]
        r = o.create_group('ref')
        r['tokens'], r['targets'] = tokens, targets
        r.attrs['names'] = ','.join(names)
        for sname, s in SCHEMES.items():
            P = {n: torch.tensor(W[n].astype(np.float64), requires_grad=True) for n in names}
            lg = forward(P, torch.tensor(tokens, dtype=torch.long), s)
            loss = F.cross_entropy(lg.reshape(-1, V), torch.tensor(targets, dtype=torch.long).reshape(-1),
                                   ignore_index=-1)
            loss.backward()
            g = r.create_group(sname)
            for k, v in s.items():
                g.attrs[k] = v
            g['logits'] = lg.detach().numpy().astype(np.float32)
            g.attrs['loss'] = loss.item()
            g['grad'] = np.concatenate([P[n].grad.numpy().ravel() for n in names]).astype(np.float32)
            print('%-15s loss %.6f  |grad| %.4f' % (sname, loss.item(), float(np.linalg.norm(g['grad'][()]))))


if __name__ == '__main__':
    main(sys.argv[1])
