#!/usr/bin/python3
"""make_arch_ref_phi3.py — a small random Phi-3 model with reference activations
from an independent PyTorch float64 forward written here from Hugging Face's
modeling_phi3.py / configuration_phi3.py, for tests/test_neox.c. Every quirk is
on and every weight random (RMSNorm weights too):
  - qkv_proj fused: rows q [H*Dh] | k [K*Dh] | v [K*Dh], grouped-query (K < H);
  - gate_up_proj fused: rows gate [M] | up [M]; up * silu(gate);
  - partial rotary: partial_rotary_factor 0.5 of a head of 8 = the first 4
    channels rotate (rotate_half within them), the rest pass;
  - rope_scaling null, sliding_window = max_position_embeddings (no window in
    effect), untied lm_head, rms_norm_eps 1e-5.

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_phi3.py tests/data

Files written (all small):
  arch_phi3/config.json, arch_phi3/model.safetensors   HF folder (phi3):
      d_model 32, 2 layers, 4 heads, 2 kv heads, d_head 8, d_mlp 48, vocab 64,
      ctx 32, rope_theta 1e4 (seed 29)
  arch_phi3.gguf    as llama.cpp's convert_hf_to_gguf writes phi3: attn_qkv and
                    ffn_up fused as in HF, q/k rows half-split (NeoX RoPE),
                    phi3.rope.dimension_count 4
  arch_phi3.h5      golden run file: /tokens [1,12], /logits, /acts/<hook>
The writers are make_arch_ref_neox.py's (struct + json), not mechprobe's.
"""
import json, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref_neox import write_safetensors, write_gguf, write_golden, to_adjacent

torch.set_default_dtype(torch.float64)

D, L, H, K, Dh, M, V, CTX, THETA, EPS, PRF = 32, 2, 4, 2, 8, 48, 64, 32, 1e4, 1e-5, 0.5
R = int(Dh * PRF)
TOKS = [1, 60, 2, 2, 33, 47, 9, 0, 14, 14, 25, 38]

def main(out):
    rng = np.random.default_rng(29)
    def w(*s): return (rng.standard_normal(s) * 0.2).astype(np.float32)
    def nw(*s): return (1.0 + rng.standard_normal(s) * 0.1).astype(np.float32)
    P = {'model.embed_tokens.weight': w(V, D), 'model.norm.weight': nw(D), 'lm_head.weight': w(V, D)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D)
        P[p + 'self_attn.qkv_proj.weight'] = w((H + 2 * K) * Dh, D)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_up_proj.weight'] = w(2 * M, D)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
    d = os.path.join(out, 'arch_phi3'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['Phi3ForCausalLM'], model_type='phi3', hidden_size=D, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=K, intermediate_size=M, vocab_size=V,
               max_position_embeddings=CTX, original_max_position_embeddings=CTX, rms_norm_eps=EPS,
               rope_theta=THETA, rope_scaling=None, partial_rotary_factor=PRF, sliding_window=CTX,
               hidden_act='silu', tie_word_embeddings=False, torch_dtype='float32')
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    kv = [('general.architecture', 'str', 'phi3'), ('phi3.context_length', 'u32', CTX),
          ('phi3.rope.scaling.original_context_length', 'u32', CTX),
          ('phi3.embedding_length', 'u32', D), ('phi3.feed_forward_length', 'u32', M),
          ('phi3.block_count', 'u32', L), ('phi3.attention.head_count', 'u32', H),
          ('phi3.attention.head_count_kv', 'u32', K), ('phi3.attention.layer_norm_rms_epsilon', 'f32', EPS),
          ('phi3.rope.dimension_count', 'u32', R), ('phi3.rope.freq_base', 'f32', THETA),
          ('phi3.attention.sliding_window', 'u32', CTX)]
    T = [('token_embd.weight', P['model.embed_tokens.weight']), ('output_norm.weight', P['model.norm.weight']),
         ('output.weight', P['lm_head.weight'])]
    names = {'input_layernorm.weight': 'attn_norm.weight', 'self_attn.qkv_proj.weight': 'attn_qkv.weight',
             'self_attn.o_proj.weight': 'attn_output.weight', 'post_attention_layernorm.weight': 'ffn_norm.weight',
             'mlp.gate_up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight'}
    for l in range(L):
        for hf, gg in names.items(): T.append((f'blk.{l}.{gg}', P[f'model.layers.{l}.{hf}']))
    write_gguf(os.path.join(out, 'arch_phi3.gguf'), kv, T)

    # reference forward (Phi3ForCausalLM, eval, no cache)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    n = len(TOKS)
    acts = {}
    def rms(x, wt): return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))
    inv = 1.0 / THETA ** (torch.arange(0, R, 2, dtype=torch.float64) / R)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    def rot_half(x): return torch.cat([-x[..., R // 2:], x[..., :R // 2]], -1)
    def rope(x):
        xr, xp = x[..., :R], x[..., R:]
        return torch.cat([xr * cos + rot_half(xr) * sin, xp], -1)
    x = t['model.embed_tokens.weight'][TOKS].unsqueeze(0)
    acts['hook_embed'] = x
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(L):
        p = f'model.layers.{l}.'
        b = f'blocks.{l}.'
        acts[b + 'hook_resid_pre'] = x
        h = rms(x, t[p + 'input_layernorm.weight']); acts[b + 'ln1.hook_normalized'] = h
        qkv = h @ t[p + 'self_attn.qkv_proj.weight'].T
        q = qkv[..., :H * Dh].view(1, n, H, Dh)
        k = qkv[..., H * Dh:(H + K) * Dh].view(1, n, K, Dh)
        v = qkv[..., (H + K) * Dh:].view(1, n, K, Dh)
        acts[b + 'attn.hook_q'] = to_adjacent(q, Dh, R); acts[b + 'attn.hook_k'] = to_adjacent(k, Dh, R)
        acts[b + 'attn.hook_v'] = v
        rq, rk = rope(q), rope(k)
        acts[b + 'attn.hook_rot_q'] = to_adjacent(rq, Dh, R); acts[b + 'attn.hook_rot_k'] = to_adjacent(rk, Dh, R)
        kk = rk.repeat_interleave(H // K, dim=2); vv = v.repeat_interleave(H // K, dim=2)
        sc = torch.einsum('bthd,bshd->bhts', rq, kk) / Dh ** 0.5
        sc = sc.masked_fill(mask, float('-inf')); acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, vv); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, H * Dh) @ t[p + 'self_attn.o_proj.weight'].T; acts[b + 'hook_attn_out'] = ao
        x = x + ao; acts[b + 'hook_resid_mid'] = x
        h = rms(x, t[p + 'post_attention_layernorm.weight']); acts[b + 'ln2.hook_normalized'] = h
        gu = h @ t[p + 'mlp.gate_up_proj.weight'].T
        g, u = gu.chunk(2, dim=-1)
        acts[b + 'mlp.hook_pre'] = g; acts[b + 'mlp.hook_pre_linear'] = u
        a = u * torch.nn.functional.silu(g); acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.down_proj.weight'].T; acts[b + 'hook_mlp_out'] = mo
        x = x + mo; acts[b + 'hook_resid_post'] = x
    h = rms(x, t['model.norm.weight']); acts['ln_final.hook_normalized'] = h
    logits = h @ t['lm_head.weight'].T
    write_golden(os.path.join(out, 'arch_phi3.h5'), TOKS, logits, acts)

if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'tests/data')
