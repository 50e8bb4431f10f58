#!/usr/bin/python3
"""peer_torch_train.py — the PyTorch peer of bench_train: the same Llama-style
model (RMSNorm, RoPE on adjacent channel pairs, SwiGLU, tied classifier), loaded
from the initial checkpoint bench_train wrote, trained with torch.optim.AdamW
(betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights only, clipping 1.0)
on the same batch, eager mode, the same thread count. Prints one line
  RESULT tokens_per_s=... step_ms=... loss0=... loss_last=... peak_rss_mb=...
usage: peer_torch_train.py INIT.h5 TOKENS.i32 --batch B --seq T --steps N --warmup-steps W --threads K
Needs Debian's python3-torch, python3-h5py, python3-numpy (/usr/bin/python3).
"""
import argparse, math, resource, time
import numpy as np, torch, h5py


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('init'); ap.add_argument('tokens')
    ap.add_argument('--batch', type=int, required=True); ap.add_argument('--seq', type=int, required=True)
    ap.add_argument('--steps', type=int, default=8); ap.add_argument('--warmup-steps', type=int, default=2)
    ap.add_argument('--threads', type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with h5py.File(a.init, 'r') as f:
        cfg = {k: f['config'].attrs[k] for k in f['config'].attrs}
        P = {k: torch.tensor(np.array(f['params'][k])) for k in f['params']}  # names contain dots
    D, L, H, K = int(cfg['d_model']), int(cfg['n_layer']), int(cfg['n_head']), int(cfg['n_kv_head'])
    Dh, eps, theta = int(cfg['d_head']), float(cfg['norm_eps']), float(cfg['rope_theta'])
    params = {k: torch.nn.Parameter(v) for k, v in P.items()}
    B, T = a.batch, a.seq
    seq = np.fromfile(a.tokens, dtype=np.int32).reshape(B, T + 1)
    tok = torch.tensor(seq[:, :T], dtype=torch.long)
    tgt = torch.tensor(seq[:, 1:], dtype=torch.long)

    i = torch.arange(0, Dh, 2, dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * (1.0 / theta ** (i / Dh))[None, :]
    cos, sin = torch.cos(ang).float()[None, :, None, :], torch.sin(ang).float()[None, :, None, :]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rope(x):  # [B,T,n,Dh], adjacent pairs
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)

    def forward():
        x = params['embed'][tok]
        for l in range(L):
            p = lambda n: params[f'blocks.{l}.{n}']
            h = rms(x, p('ln1.weight'))
            q = rope((h @ p('attn.wq').T).view(B, T, H, Dh))
            k = rope((h @ p('attn.wk').T).view(B, T, K, Dh))
            v = (h @ p('attn.wv').T).view(B, T, K, Dh)
            if K != H:
                k = k.repeat_interleave(H // K, dim=2); v = v.repeat_interleave(H // K, dim=2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
            z = torch.softmax(s.masked_fill(mask, float('-inf')), -1) @ v
            x = x + z.transpose(1, 2).reshape(B, T, H * Dh) @ p('attn.wo').T
            h = rms(x, p('ln2.weight'))
            x = x + (torch.nn.functional.silu(h @ p('mlp.w1').T) * (h @ p('mlp.w3').T)) @ p('mlp.w2').T
        x = rms(x, params['ln_final.weight'])
        logits = x @ params.get('unembed', params['embed']).T
        return torch.nn.functional.cross_entropy(logits.view(B * T, -1), tgt.reshape(-1))

    decay = [p for n, p in params.items() if p.dim() == 2]
    nodecay = [p for n, p in params.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': nodecay, 'weight_decay': 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times, loss0, loss = [], None, None
    for step in range(a.warmup_steps + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        lo = forward()
        lo.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        loss = lo.item()
        if loss0 is None:
            loss0 = loss
        if step >= a.warmup_steps:
            times.append(dt)
    med = sorted(times)[len(times) // 2]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"RESULT tokens_per_s={B * T / med:.0f} step_ms={1e3 * med:.2f} loss0={loss0:.5f} "
          f"loss_last={loss:.5f} peak_rss_mb={rss:.1f}")


if __name__ == '__main__':
    main()
