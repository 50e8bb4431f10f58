#!/usr/bin/python3
"""make_arch_ref_neox.py — small random GPT-NeoX (Pythia) models with reference
activations from an independent PyTorch float64 forward written here from
Hugging Face's modeling_gpt_neox.py / configuration_gpt_neox.py, for
tests/test_neox.c. Every quirk is on and every weight random (LayerNorm
weights and biases, q/k/v, dense and MLP biases), so a loader mistake cannot
hide:
  - query_key_value fused per head: rows [H, 3, Dh] (q, k, v of head h);
  - partial rotary: rotary_ndims = int(head_size * rotary_pct) = int(16 * 0.25)
    = 4 channels of each head rotate (rotate_half within them,
    inv_freq = base^(-arange(0, r, 2) / r)), the other 12 pass;
  - use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x));
  - exact GELU ("gelu", erf); untied embed_out; LayerNorm eps 1e-5.

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_neox.py tests/data

Files written (all small):
  arch_neox/config.json, arch_neox/model.safetensors   HF folder (gpt_neox):
      d_model 64, 2 layers, 4 heads of 16, d_mlp 96, vocab 64, ctx 32,
      rotary_pct 0.25, rotary_emb_base 500, parallel residual (seed 23)
  arch_neox.gguf    the same weights as llama.cpp's convert_hf_to_gguf writes
                    gptneox: attn_qkv rows reordered to q | k | v (each [H, Dh]),
                    q/k rows kept half-split (NeoX RoPE), gptneox.rope.dimension_count
                    4, gptneox.use_parallel_residual true
  arch_neox.h5      golden run file: /tokens [1,12], /logits, /acts/<hook>
  arch_neox_serial.h5   golden of the same weights with use_parallel_residual
                    false (x + attn, then + mlp of its norm): the test writes that
                    config.json beside a copy of arch_neox's weights
The GGUF and safetensors files are written by the independent writers below
(struct + json), not by mechprobe's.

Hook conventions: q/k hooks are in mechprobe's channel order: within the
rotated channels adjacent pairs (2i, 2i+1) = the reference's (i, i + r/2), the
passed channels as they are. A parallel block has no hook_resid_mid
(TransformerLens's parallel_attn_mlp); its hook_mlp_in is resid_pre.
"""
import json, os, struct, sys
import numpy as np
import torch
import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref import write_safetensors, gguf_str, write_gguf  # noqa: E402  (the independent writers)

torch.set_default_dtype(torch.float64)   # reference in double, stored as float32

# ---------------- independent writers ----------------

def write_golden(path, tokens, logits, acts):
    with h5py.File(path, 'w') as f:
        f.attrs['format'] = 'mechprobe.run'
        f.attrs['version'] = 1
        f.create_dataset('tokens', data=np.array([tokens], dtype=np.int32))
        f.create_dataset('logits', data=logits.detach().numpy().astype(np.float32))
        g = f.create_group('acts')
        for k, v in acts.items():
            g.create_dataset(k, data=v.detach().numpy().astype(np.float32))

def to_adjacent(x, Dh, r):
    """[..., nh, Dh]: the first r channels of each head from half-split (i, i + r/2) to
    adjacent pairs (2i, 2i+1); the rest unchanged."""
    rot, rest = x[..., :r], x[..., r:]
    rot = rot.reshape(*rot.shape[:-1], 2, r // 2).transpose(-1, -2).reshape(*rot.shape)
    return torch.cat([rot, rest], -1)

# ---------------- GPT-NeoX ----------------

D, L, H, M, V, CTX, PCT, BASE, EPS = 64, 2, 4, 96, 64, 32, 0.25, 500.0, 1e-5
Dh = D // H
R = int(Dh * PCT)            # rotary_ndims

def params():
    rng = np.random.default_rng(23)
    def w(*s): return (rng.standard_normal(s) * 0.2).astype(np.float32)
    def nw(*s): return (1.0 + rng.standard_normal(s) * 0.1).astype(np.float32)
    P = {'gpt_neox.embed_in.weight': w(V, D), 'gpt_neox.final_layer_norm.weight': nw(D),
         'gpt_neox.final_layer_norm.bias': w(D), 'embed_out.weight': w(V, D)}
    for l in range(L):
        p = f'gpt_neox.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D); P[p + 'input_layernorm.bias'] = w(D)
        P[p + 'post_attention_layernorm.weight'] = nw(D); P[p + 'post_attention_layernorm.bias'] = w(D)
        P[p + 'attention.query_key_value.weight'] = w(3 * D, D); P[p + 'attention.query_key_value.bias'] = w(3 * D)
        P[p + 'attention.dense.weight'] = w(D, D); P[p + 'attention.dense.bias'] = w(D)
        P[p + 'mlp.dense_h_to_4h.weight'] = w(M, D); P[p + 'mlp.dense_h_to_4h.bias'] = w(M)
        P[p + 'mlp.dense_4h_to_h.weight'] = w(D, M); P[p + 'mlp.dense_4h_to_h.bias'] = w(D)
    return P

def config(parallel):
    return dict(architectures=['GPTNeoXForCausalLM'], model_type='gpt_neox', hidden_size=D, num_hidden_layers=L,
                num_attention_heads=H, intermediate_size=M, vocab_size=V, max_position_embeddings=CTX,
                rotary_pct=PCT, rotary_emb_base=BASE, layer_norm_eps=EPS, hidden_act='gelu',
                use_parallel_residual=parallel, tie_word_embeddings=False, attention_bias=True,
                torch_dtype='float32')

def write_gguf_neox(path, P):
    """As convert_hf_to_gguf.py's GPTNeoXModel: qkv reshaped (n_head, 3, Dh, D) and concatenated q | k | v."""
    kv = [('general.architecture', 'str', 'gptneox'), ('gptneox.context_length', 'u32', CTX),
          ('gptneox.embedding_length', 'u32', D), ('gptneox.block_count', 'u32', L),
          ('gptneox.feed_forward_length', 'u32', M), ('gptneox.rope.dimension_count', 'u32', R),
          ('gptneox.attention.head_count', 'u32', H), ('gptneox.use_parallel_residual', 'bool', True),
          ('gptneox.attention.layer_norm_epsilon', 'f32', EPS), ('gptneox.rope.freq_base', 'f32', BASE)]
    T = [('token_embd.weight', P['gpt_neox.embed_in.weight']),
         ('output_norm.weight', P['gpt_neox.final_layer_norm.weight']),
         ('output_norm.bias', P['gpt_neox.final_layer_norm.bias']), ('output.weight', P['embed_out.weight'])]
    for l in range(L):
        p = f'gpt_neox.layers.{l}.'
        qkv = P[p + 'attention.query_key_value.weight'].reshape(H, 3, Dh, D)
        qkv = np.concatenate([qkv[:, j].reshape(-1, D) for j in range(3)], 0)
        qb = P[p + 'attention.query_key_value.bias'].reshape(H, 3, Dh)
        qb = np.concatenate([qb[:, j].reshape(-1) for j in range(3)], 0)
        T += [(f'blk.{l}.attn_norm.weight', P[p + 'input_layernorm.weight']),
              (f'blk.{l}.attn_norm.bias', P[p + 'input_layernorm.bias']),
              (f'blk.{l}.attn_qkv.weight', qkv), (f'blk.{l}.attn_qkv.bias', qb),
              (f'blk.{l}.attn_output.weight', P[p + 'attention.dense.weight']),
              (f'blk.{l}.attn_output.bias', P[p + 'attention.dense.bias']),
              (f'blk.{l}.ffn_norm.weight', P[p + 'post_attention_layernorm.weight']),
              (f'blk.{l}.ffn_norm.bias', P[p + 'post_attention_layernorm.bias']),
              (f'blk.{l}.ffn_up.weight', P[p + 'mlp.dense_h_to_4h.weight']),
              (f'blk.{l}.ffn_up.bias', P[p + 'mlp.dense_h_to_4h.bias']),
              (f'blk.{l}.ffn_down.weight', P[p + 'mlp.dense_4h_to_h.weight']),
              (f'blk.{l}.ffn_down.bias', P[p + 'mlp.dense_4h_to_h.bias'])]
    write_gguf(path, kv, T)

TOKS = [3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33]

def forward(P, parallel):
    """GPTNeoXForCausalLM's forward (eval, no cache) in float64, with the hook points."""
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    n = len(TOKS)
    acts = {}
    def ln(x, wt, bs): return torch.nn.functional.layer_norm(x, (D,), wt, bs, EPS)
    def gelu(x): return 0.5 * x * (1.0 + torch.erf(x / np.sqrt(2.0)))     # ACT2FN["gelu"]
    inv = 1.0 / BASE ** (torch.arange(0, R, 2, dtype=torch.float64) / R)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    def rot_half(x): return torch.cat([-x[..., R // 2:], x[..., :R // 2]], -1)
    def rope(x):
        xr, xp = x[..., :R], x[..., R:]
        return torch.cat([xr * cos + rot_half(xr) * sin, xp], -1)
    x = t['gpt_neox.embed_in.weight'][TOKS].unsqueeze(0)
    acts['hook_embed'] = x
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(L):
        p = f'gpt_neox.layers.{l}.'
        b = f'blocks.{l}.'
        acts[b + 'hook_resid_pre'] = x
        h = ln(x, t[p + 'input_layernorm.weight'], t[p + 'input_layernorm.bias']); acts[b + 'ln1.hook_normalized'] = h
        qkv = h @ t[p + 'attention.query_key_value.weight'].T + t[p + 'attention.query_key_value.bias']
        qkv = qkv.view(1, n, H, 3 * Dh)
        q, k, v = qkv[..., :Dh], qkv[..., Dh:2 * Dh], qkv[..., 2 * Dh:]
        acts[b + 'attn.hook_q'] = to_adjacent(q, Dh, R); acts[b + 'attn.hook_k'] = to_adjacent(k, Dh, R)
        acts[b + 'attn.hook_v'] = v
        rq, rk = rope(q), rope(k)
        acts[b + 'attn.hook_rot_q'] = to_adjacent(rq, Dh, R); acts[b + 'attn.hook_rot_k'] = to_adjacent(rk, Dh, R)
        sc = torch.einsum('bthd,bshd->bhts', rq, rk) / np.sqrt(Dh)     # norm_factor = sqrt(head_size)
        sc = sc.masked_fill(mask, float('-inf')); acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, v); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, D) @ t[p + 'attention.dense.weight'].T + t[p + 'attention.dense.bias']
        acts[b + 'hook_attn_out'] = ao
        if parallel:
            mlp_in = x
        else:
            x = x + ao; acts[b + 'hook_resid_mid'] = x
            mlp_in = x
        h = ln(mlp_in, t[p + 'post_attention_layernorm.weight'], t[p + 'post_attention_layernorm.bias'])
        acts[b + 'ln2.hook_normalized'] = h
        pre = h @ t[p + 'mlp.dense_h_to_4h.weight'].T + t[p + 'mlp.dense_h_to_4h.bias']; acts[b + 'mlp.hook_pre'] = pre
        a = gelu(pre); acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.dense_4h_to_h.weight'].T + t[p + 'mlp.dense_4h_to_h.bias']; acts[b + 'hook_mlp_out'] = mo
        x = (mo + ao + x) if parallel else (x + mo)
        acts[b + 'hook_resid_post'] = x
    h = ln(x, t['gpt_neox.final_layer_norm.weight'], t['gpt_neox.final_layer_norm.bias'])
    acts['ln_final.hook_normalized'] = h
    logits = h @ t['embed_out.weight'].T
    return logits, acts

def main(out):
    P = params()
    d = os.path.join(out, 'arch_neox'); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(config(True), f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    for parallel, name in ((True, 'arch_neox'), (False, 'arch_neox_serial')):
        logits, acts = forward(P, parallel)
        write_golden(os.path.join(out, name + '.h5'), TOKS, logits, acts)
    write_gguf_neox(os.path.join(out, 'arch_neox.gguf'), P)

if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'tests/data')
