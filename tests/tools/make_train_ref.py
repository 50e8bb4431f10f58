#!/usr/bin/python3
"""make_train_ref.py — PyTorch reference for mechprobe's training engine.

For each init checkpoint (written by `test_train --write-init DIR`, DESIGN.md's
HDF5 schema, read here with h5py) it builds the same transformer in PyTorch
(float64, written independently of the C code: RMSNorm/LayerNorm, RoPE on
adjacent pairs or no positions, grouped-query causal attention, SwiGLU / exact
GELU / no MLP, tied or untied classifier), then
  * runs the init model on batch 0 and stores every DESIGN.md hook point
    (golden inference for the config),
  * takes 10 torch.optim.AdamW steps (decay on 2-D weights only, linear warmup
    + cosine to min_lr set per step, clip_grad_norm_, gradient accumulation
    over micro-batches) on fixed batches with masked targets (-1 ignored,
    F.cross_entropy(ignore_index=-1)), and stores the losses and final params.
Output: a copy of the init checkpoint plus /ref (tokens, targets, losses,
grad norms, hyper-parameters as attrs, /ref/acts/<hook>, /ref/final/<name>).

Exact commands (from the repository root; Debian's python3 with torch, h5py):
  build/tests/test_train --write-init /tmp/train_init
  for c in a b c; do /usr/bin/python3 tests/tools/make_train_ref.py \
      /tmp/train_init/train_init_$c.h5 tests/data/train_ref_$c.h5; done
"""
import math, sys
import h5py, numpy as np, torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

HP = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, warmup=3,
          total_steps=10, min_lr=1e-3, grad_clip=1.0)
STEPS, B, T = 10, 4, 8

def lr_at(s):
    if HP['warmup'] > 0 and s < HP['warmup']:
        return HP['lr'] * (s + 1) / HP['warmup']
    prog = min(1.0, (s - HP['warmup']) / (HP['total_steps'] - HP['warmup']))
    return HP['min_lr'] + 0.5 * (HP['lr'] - HP['min_lr']) * (1 + math.cos(math.pi * prog))

class Model:
    def __init__(self, f):
        c = dict(f['/config'].attrs)
        self.c = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in c.items()}
        self.P = {}
        def walk(name, obj):
            if isinstance(obj, h5py.Dataset):
                self.P[name] = torch.tensor(obj[()].astype(np.float64), requires_grad=True)
        f['/params'].visititems(walk)

    def norm(self, x, pre):
        c = self.c
        w = self.P[pre + '.weight']
        if c['norm'] == 'layer':
            return F.layer_norm(x, (x.shape[-1],), w, self.P[pre + '.bias'], eps=float(c['norm_eps']))
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + float(c['norm_eps'])) * w

    def rope(self, x):  # x [B,T,nh,Dh], pairs (2i, 2i+1)
        Dh = x.shape[-1]
        Tn = x.shape[1]
        i = torch.arange(Dh // 2, dtype=torch.float64)
        freq = 1.0 / (float(self.c['rope_theta']) ** (2 * i / Dh))
        ang = torch.arange(Tn, dtype=torch.float64)[:, None] * freq[None, :]  # [T, Dh/2]
        cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        return out.reshape(x.shape)

    def forward(self, tok, acts=None):
        c = self.c
        H, K, Dh, L = int(c['n_head']), int(c['n_kv_head']), int(c['d_head']), int(c['n_layer'])
        Bn, Tn = tok.shape
        def rec(name, v):
            if acts is not None: acts[name] = v.detach().clone()
        x = self.P['embed'][tok]
        rec('hook_embed', x)
        mask = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
        for l in range(L):
            b = 'blocks.%d.' % l
            rec(b + 'hook_resid_pre', x)
            h = self.norm(x, b + 'ln1')
            rec(b + 'ln1.hook_normalized', h)
            q = (h @ self.P[b + 'attn.wq'].T).view(Bn, Tn, H, Dh)
            k = (h @ self.P[b + 'attn.wk'].T).view(Bn, Tn, K, Dh)
            v = (h @ self.P[b + 'attn.wv'].T).view(Bn, Tn, K, Dh)
            rec(b + 'attn.hook_q', q); rec(b + 'attn.hook_k', k); rec(b + 'attn.hook_v', v)
            if c['pos'] == 'rope':
                q, k = self.rope(q), self.rope(k)
            rec(b + 'attn.hook_rot_q', q); rec(b + 'attn.hook_rot_k', k)
            g = H // K
            kk = k.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)  # [B,H,T,Dh]
            vv = v.repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
            qq = q.permute(0, 2, 1, 3)
            s = qq @ kk.transpose(-1, -2) / math.sqrt(Dh)
            s = s.masked_fill(mask, float('-inf'))
            rec(b + 'attn.hook_attn_scores', s)
            pat = torch.softmax(s, dim=-1)
            rec(b + 'attn.hook_pattern', pat)
            z = (pat @ vv).permute(0, 2, 1, 3)  # [B,T,H,Dh]
            rec(b + 'attn.hook_z', z)
            ao = z.reshape(Bn, Tn, H * Dh) @ self.P[b + 'attn.wo'].T
            rec(b + 'hook_attn_out', ao)
            x = x + ao
            rec(b + 'hook_resid_mid', x)
            if c['mlp'] != 'none':
                h2 = self.norm(x, b + 'ln2')
                rec(b + 'ln2.hook_normalized', h2)
                pre = h2 @ self.P[b + 'mlp.w1'].T
                rec(b + 'mlp.hook_pre', pre)
                if c['mlp'] == 'swiglu':
                    up = h2 @ self.P[b + 'mlp.w3'].T
                    rec(b + 'mlp.hook_pre_linear', up)
                    post = F.silu(pre) * up
                else:
                    post = F.gelu(pre)  # exact erf form
                rec(b + 'mlp.hook_post', post)
                mo = post @ self.P[b + 'mlp.w2'].T
                rec(b + 'hook_mlp_out', mo)
                x = x + mo
            rec(b + 'hook_resid_post', x)
        hf = self.norm(x, 'ln_final')
        rec('ln_final.hook_normalized', hf)
        W = self.P['embed'] if int(c['tied']) else self.P['unembed']
        return hf @ W.T

def main(src, dst):
    f = h5py.File(src, 'r')
    m = Model(f)
    c = m.c
    V = int(c['vocab'])
    accum = 2 if c['mlp'] == 'swiglu' else 1
    rng = np.random.default_rng(int(c['d_model']) * 100 + int(c['vocab']))
    toks = rng.integers(0, V, size=(STEPS, B, T + 1))
    tokens = toks[:, :, :T].astype(np.int32)
    targets = toks[:, :, 1:].astype(np.int32).copy()
    targets[rng.random(targets.shape) < 0.25] = -1
    targets[:, :, -1] = -1
    # golden inference on batch 0
    acts = {}
    with torch.no_grad():
        logits0 = m.forward(torch.tensor(tokens[0], dtype=torch.long), acts)
    decay = [p for n, p in m.P.items() if p.dim() == 2]
    no_decay = [p for n, p in m.P.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': HP['weight_decay']},
                             {'params': no_decay, 'weight_decay': 0.0}],
                            lr=HP['lr'], betas=(HP['beta1'], HP['beta2']), eps=HP['eps'])
    losses, norms = [], []
    for s in range(STEPS):
        for g in opt.param_groups: g['lr'] = lr_at(s)
        opt.zero_grad()
        tot = 0.0
        mb = B // accum
        for a in range(accum):
            tk = torch.tensor(tokens[s, a * mb:(a + 1) * mb], dtype=torch.long)
            tg = torch.tensor(targets[s, a * mb:(a + 1) * mb], dtype=torch.long)
            lg = m.forward(tk)
            loss = F.cross_entropy(lg.reshape(-1, V), tg.reshape(-1), ignore_index=-1)
            (loss / accum).backward()
            tot += loss.item()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(m.P.values()), HP['grad_clip'])))
        opt.step()
        losses.append(tot / accum)
    print(src, 'losses', ['%.5f' % l for l in losses])
    print('  grad norms', ['%.3f' % n for n in norms], '(clip at %g)' % HP['grad_clip'])
    with h5py.File(dst, 'w') as o:
        for k, v in f.attrs.items(): o.attrs[k] = v
        f.copy('/config', o)
        f.copy('/params', o)
        r = o.create_group('ref')
        for k, v in HP.items(): r.attrs[k] = v
        r.attrs['accum'] = accum
        r.attrs['steps'] = STEPS
        r['tokens'] = tokens
        r['targets'] = targets
        r['loss'] = np.array(losses)
        r['grad_norm'] = np.array(norms)
        r['logits0'] = logits0.numpy().astype(np.float32)
        for k, v in acts.items(): r['acts/' + k] = v.numpy().astype(np.float32)
        for k, v in m.P.items(): r['final/' + k] = v.detach().numpy().astype(np.float32)

if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
