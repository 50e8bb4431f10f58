#!/usr/bin/python3
"""make_attn_ref.py — PyTorch reference for mechprobe's attention variants.

Written independently of the C code, from the definitions (issue 8 and the
papers): for the query at 0-based position t, which sees n = t + 1 keys, with
scores u = q.k / sqrt(Dh) (causally masked),
  softmax   softmax(u)
  ssmax     softmax(s_h log(n) u)                          (Nakanishi 2025)
  entmax15  1.5-entmax(u): Peters, Niculae & Martins 2019, the sort-based
            algorithm, differentiated by torch autograd through the sort
  entmax    alpha-entmax(u) = [(alpha-1) u - tau]_+^(1/(alpha-1)), tau by
            bisection (no gradient), then one Newton step on
            F(tau) = sum p - 1 at the solution, through which autograd gives
            the implicit-function derivative d tau / d u = -F_u / F_tau
  asentmax  alpha-entmax((delta_h + beta_h (log n)^gamma_h) u)
            ((log n)^gamma taken as 0 for n = 1)   (Vasylenko et al. 2025)
No entmax package: both solvers are written here.

One small RMSNorm / SwiGLU / grouped-query RoPE model (float32 weights drawn
here, computed in float64; q/k projections drawn larger so that the entmax
patterns have many exact zeros) runs under each variant on a fixed batch longer
than the training length; logits, the masked mean cross-entropy and its
gradient with respect to every parameter (including s / delta / beta / gamma)
are stored.

Output tests/data/attn_ref.h5 — a mechprobe checkpoint of the softmax model
(/ attrs, /config, /params) plus
  /ref/tokens, /ref/targets          int32 [B,T]
  /ref/<variant> attrs               attn (name), alpha, loss (float64), names
                                     (comma-separated parameter order of grad),
                                     zeros (exact zeros in the layer-0 pattern)
  /ref/<variant>/params/<name>       the variant's extra parameters [H] per layer
  /ref/<variant>/logits              float32 [B,T,V]
  /ref/<variant>/grad                float32, the gradients concatenated

Command (from the repository root):
  /usr/bin/python3 tests/tools/make_attn_ref.py tests/data/attn_ref.h5
"""
import math, sys
import h5py, numpy as np, torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

CFG = dict(d_model=16, n_layer=2, n_head=2, n_kv_head=1, d_head=8, d_mlp=16, vocab=13, ctx=8,
           tied=1, rope_theta=100.0, norm_eps=1e-5)
B, T = 2, 20

# extra per-head parameters [L][H] of the variants that have them
S = [[0.55, 0.3], [0.45, 0.7]]
AS = dict(as_delta=[[0.9, 1.2], [1.1, 0.8]], as_beta=[[0.3, 0.1], [0.2, 0.4]], as_gamma=[[0.8, 1.3], [1.0, 0.6]])

VARIANTS = {
    'softmax': dict(attn='softmax', alpha=1.0),
    'ssmax': dict(attn='ssmax', alpha=1.0, extra=dict(ssmax_s=S)),
    'entmax15': dict(attn='entmax15', alpha=1.5),
    'entmax13': dict(attn='entmax', alpha=1.3),
    'sparsemax': dict(attn='entmax', alpha=2.0),
    'asentmax': dict(attn='asentmax', alpha=1.5, extra=AS),
    'asentmax13': dict(attn='asentmax', alpha=1.3, extra=AS),
}


def entmax15(z):
    """1.5-entmax over the last axis (masked entries -inf), sort-based."""
    X = z / 2
    X = X - X.max(-1, keepdim=True).values
    Xs, _ = torch.sort(X, dim=-1, descending=True)
    fin = torch.isfinite(Xs)
    Xf = torch.where(fin, Xs, torch.zeros_like(Xs))
    k = torch.arange(1, X.shape[-1] + 1, dtype=X.dtype)
    mean = Xf.cumsum(-1) / k
    msq = (Xf * Xf).cumsum(-1) / k
    ss = k * (msq - mean * mean)
    delta = (1 - ss) / k
    tau = mean - torch.sqrt(torch.clamp(delta, min=1e-30))
    support = ((tau <= Xf) & fin).sum(-1, keepdim=True)
    tau_star = tau.gather(-1, support - 1)
    return torch.clamp(X - tau_star, min=0) ** 2


def entmax_bisect(z, alpha, iters=200):
    """alpha-entmax over the last axis by bisection + one Newton step (for autograd)."""
    e = 1.0 / (alpha - 1)
    X = (alpha - 1) * z
    X = X - X.max(-1, keepdim=True).values.detach()
    n = torch.isfinite(X).sum(-1, keepdim=True).to(X.dtype)
    Xd = X.detach()
    lo, hi = -torch.ones_like(n), -(1.0 / n) ** (alpha - 1)
    for _ in range(iters):
        mid = (lo + hi) / 2
        f = (torch.clamp(Xd - mid, min=0) ** e).sum(-1, keepdim=True) - 1
        lo, hi = torch.where(f >= 0, mid, lo), torch.where(f >= 0, hi, mid)
    tau0 = lo
    x = X - tau0
    pos = x > 0
    xs = torch.where(pos, x, torch.ones_like(x))
    Fv = torch.where(pos, xs ** e, torch.zeros_like(x)).sum(-1, keepdim=True) - 1
    Ft = -e * torch.where(pos, xs ** (e - 1), torch.zeros_like(x)).sum(-1, keepdim=True)
    tau = tau0 - Fv / Ft
    p = torch.clamp(X - tau, min=0) ** e
    return p / p.sum(-1, keepdim=True)


def rotate(x):  # x [B,T,nh,Dh], adjacent pairs, rope with theta
    Tn, Dh = x.shape[1], x.shape[3]
    fr = torch.tensor([CFG['rope_theta'] ** (-2.0 * i / Dh) for i in range(Dh // 2)])
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * fr[None, :]
    cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(x.shape)


def pattern(sc, v, P, l, mask):
    """sc [B,H,T,T] unmasked scores -> attention pattern under variant v."""
    Tn = sc.shape[-1]
    n = torch.arange(1, Tn + 1, dtype=torch.float64)
    kind = v['attn']
    b = 'blocks.%d.attn.' % l
    if kind == 'ssmax':
        f = P[b + 'ssmax_s'][:, None] * torch.log(n)[None, :]              # [H,T]
        sc = sc * f[None, :, :, None]
    elif kind == 'asentmax':
        L = torch.where(n > 1, torch.log(n), torch.ones_like(n))
        pw = torch.where(n[None, :] > 1, L[None, :] ** P[b + 'as_gamma'][:, None], torch.zeros(1))
        f = P[b + 'as_delta'][:, None] + P[b + 'as_beta'][:, None] * pw
        sc = sc * f[None, :, :, None]
    sc = sc.masked_fill(mask, float('-inf'))
    if kind in ('softmax', 'ssmax'):
        return torch.softmax(sc, dim=-1)
    if v['alpha'] == 1.5 and kind in ('entmax15', 'asentmax'):
        return entmax15(sc)
    return entmax_bisect(sc, v['alpha'])


def forward(P, tok, v):
    H, K, Dh, L = CFG['n_head'], CFG['n_kv_head'], CFG['d_head'], CFG['n_layer']
    Bn, Tn = tok.shape

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + CFG['norm_eps']) * w
    x = P['embed'][tok]
    mask = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
    pats = []
    for l in range(L):
        b = 'blocks.%d.' % l
        h = rms(x, P[b + 'ln1.weight'])
        q = rotate((h @ P[b + 'attn.wq'].T).view(Bn, Tn, H, Dh))
        k = rotate((h @ P[b + 'attn.wk'].T).view(Bn, Tn, K, Dh))
        vv = (h @ P[b + 'attn.wv'].T).view(Bn, Tn, K, Dh)
        g = H // K
        kk = k.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
        vv = vv.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
        sc = q.permute(0, 2, 1, 3) @ kk.transpose(-1, -2) / math.sqrt(Dh)
        pat = pattern(sc, v, P, l, mask)
        pats.append(pat)
        z = (pat @ vv).permute(0, 2, 1, 3).reshape(Bn, Tn, H * Dh)
        x = x + z @ P[b + 'attn.wo'].T
        h2 = rms(x, P[b + 'ln2.weight'])
        x = x + (F.silu(h2 @ P[b + 'mlp.w1'].T) * (h2 @ P[b + 'mlp.w3'].T)) @ P[b + 'mlp.w2'].T
    return rms(x, P['ln_final.weight']) @ P['embed'].T, pats


def self_checks():
    """The two solvers agree at alpha 1.5; alpha 2 is the simplex projection."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(50, 9, generator=g) * 2
    d15 = (entmax15(z) - entmax_bisect(z, 1.5)).abs().max().item()
    # and their gradients (autograd through the sort vs the implicit Newton step)
    w = torch.randn(50, 9, generator=g)
    za = z.clone().requires_grad_(True)
    (entmax15(za) * w).sum().backward()
    zb = z.clone().requires_grad_(True)
    (entmax_bisect(zb, 1.5) * w).sum().backward()
    dg = (za.grad - zb.grad).abs().max().item()
    assert dg < 1e-9, dg
    # sparsemax by the classic sort: tau = (cumsum_k - 1)/k at the largest k with z_k > tau_k
    zs, _ = torch.sort(z, -1, descending=True)
    k = torch.arange(1, 10, dtype=z.dtype)
    tk = (zs.cumsum(-1) - 1) / k
    kk = (zs > tk).sum(-1, keepdim=True)
    sp = torch.clamp(z - tk.gather(-1, kk - 1), min=0)
    d2 = (sp - entmax_bisect(z, 2.0)).abs().max().item()
    assert d15 < 1e-10 and d2 < 1e-10, (d15, d2)
    print('self-checks: entmax15 vs bisection %.1e (gradients %.1e), sparsemax vs projection %.1e' % (d15, dg, d2))


def main(dst):
    self_checks()
    rng = np.random.default_rng(14)
    D, M, V = CFG['d_model'], CFG['d_mlp'], CFG['vocab']
    H, L = CFG['n_head'], CFG['n_layer']
    HD, KD = H * CFG['d_head'], CFG['n_kv_head'] * CFG['d_head']
    names, shapes = ['embed'], [(V, D)]
    for l in range(L):
        b = 'blocks.%d.' % l
        names += [b + 'ln1.weight', b + 'attn.wq', b + 'attn.wk', b + 'attn.wv', b + 'attn.wo', b + 'ln2.weight',
                  b + 'mlp.w1', b + 'mlp.w3', b + 'mlp.w2']
        shapes += [(D,), (HD, D), (KD, D), (KD, D), (D, HD), (D,), (M, D), (M, D), (D, M)]
    names.append('ln_final.weight')
    shapes.append((D,))
    W = {}
    for n, sh in zip(names, shapes):
        if len(sh) == 1:
            W[n] = 1.0 + 0.2 * rng.standard_normal(sh)
        else:
            W[n] = (0.6 if ('attn.wq' in n or 'attn.wk' in n) else 0.4) * rng.standard_normal(sh)
        W[n] = W[n].astype(np.float32)   # the C side reads float32: use exactly those values
    toks = rng.integers(0, V, size=(B, T + 1))
    tokens, targets = toks[:, :T].astype(np.int32), toks[:, 1:].astype(np.int32).copy()
    targets[rng.random(targets.shape) < 0.2] = -1
    with h5py.File(dst, 'w', libver='latest') as o:
        o.attrs['format'] = 'mechprobe.checkpoint'
        o.attrs['version'] = 1
        o.attrs['source'] = 'tests/tools/make_attn_ref.py'
        c = o.create_group('config')
        for k, v in CFG.items():
            c.attrs[k] = v
        c.attrs['norm'], c.attrs['mlp'], c.attrs['pos'] = 'rms', 'swiglu', 'rope'
        for n in names:
            o['params/' + n] = W[n]
        r = o.create_group('ref')
        r['tokens'], r['targets'] = tokens, targets
        for vname, v in VARIANTS.items():
            Wv = dict(W)
            vnames = list(names)
            for pn, vals in v.get('extra', {}).items():
                for l in range(L):
                    nm = 'blocks.%d.attn.%s' % (l, pn)
                    Wv[nm] = np.array(vals[l], dtype=np.float32)
                    vnames.append(nm)
            P = {n: torch.tensor(Wv[n].astype(np.float64), requires_grad=True) for n in vnames}
            lg, pats = forward(P, torch.tensor(tokens, dtype=torch.long), v)
            loss = F.cross_entropy(lg.reshape(-1, V), torch.tensor(targets, dtype=torch.long).reshape(-1),
                                   ignore_index=-1)
            loss.backward()
            g = r.create_group(vname)
            g.attrs['attn'] = v['attn']
            g.attrs['alpha'] = v['alpha']
            g.attrs['names'] = ','.join(vnames)
            tri = torch.tril(torch.ones(T, T, dtype=torch.bool))
            zeros = int(((pats[0] == 0) & tri).sum())
            g.attrs['zeros'] = zeros
            for n in vnames[len(names):]:
                g['params/' + n] = Wv[n]
            g['logits'] = lg.detach().numpy().astype(np.float32)
            g.attrs['loss'] = loss.item()
            g['grad'] = np.concatenate([P[n].grad.numpy().ravel() for n in vnames]).astype(np.float32)
            print('%-11s loss %.6f  |grad| %.4f  layer-0 pattern zeros %d of %d' %
                  (vname, loss.item(), float(np.linalg.norm(g['grad'][()])), zeros, int(tri.sum()) * B * H))


if __name__ == '__main__':
    main(sys.argv[1])
