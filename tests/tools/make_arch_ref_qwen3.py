#!/usr/bin/python3
"""make_arch_ref_qwen3.py — a small random Qwen3 model with reference
activations from an independent PyTorch float64 forward written here from
Hugging Face's published modeling_qwen3.py (Qwen3Attention: q_norm /
k_norm, an RMSNorm over each head's head_dim channels with one weight
[head_dim], applied to q_proj(x).view(..., -1, head_dim) and k_proj(x)
likewise, then rotate_half RoPE; eps = rms_norm_eps), for tests/test_qwen3.c.

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_qwen3.py tests/data

Files written (all small):
  arch_qwen3/config.json, arch_qwen3/model.safetensors   HF folder (qwen3):
      d_model 32, 2 layers, 4 heads, 2 kv heads, head_dim 16 (H*Dh = 64 != D),
      d_mlp 48, vocab 64, ctx 32, rope_theta 1e6, rms eps 1e-6, no attention
      bias, tied classifier (seed 23); every norm weight (the q/k norms'
      included) random around 1, so a loader that drops or mis-permutes one
      cannot match
  arch_qwen3.gguf        the same weights as llama.cpp's converter writes qwen3
                         (half-split q/k rows and q/k norm weights: NeoX RoPE;
                         attention.key_length 16)
  arch_qwen3.h5          golden run file: /tokens [1,12], /logits, /acts/<hook>
                         including blocks.L.attn.q_norm.hook_normalized and
                         blocks.L.attn.k_norm.hook_normalized (the norms'
                         outputs, weight applied, before RoPE)
The GGUF and safetensors files are written by make_arch_ref.py's independent
writers (struct + json), not by mechprobe's.

Hook conventions as make_arch_ref.py: q/k hooks (hook_q, hook_k, the q/k norm
outputs, hook_rot_q, hook_rot_k) in mechprobe's channel order, adjacent RoPE
pairs (2i, 2i+1), i.e. the reference's half-split channels interleaved.
"""
import json, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref import write_safetensors, write_gguf, write_golden, to_adjacent  # noqa: E402

torch.set_default_dtype(torch.float64)


def qwen3(out):
    D, L, H, K, Dh, M, V, ctx, theta, eps = 32, 2, 4, 2, 16, 48, 64, 32, 1e6, 1e-6
    rng = np.random.default_rng(23)
    def w(*s): return (rng.standard_normal(s) * 0.2).astype(np.float32)
    def nw(*s, sd=0.1): return (1.0 + rng.standard_normal(s) * sd).astype(np.float32)
    P = {'model.embed_tokens.weight': w(V, D), 'model.norm.weight': nw(D)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D)
        P[p + 'self_attn.q_proj.weight'] = w(H * Dh, D)
        P[p + 'self_attn.k_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.v_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'self_attn.q_norm.weight'] = nw(Dh, sd=0.4)
        P[p + 'self_attn.k_norm.weight'] = nw(Dh, sd=0.4)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_proj.weight'] = w(M, D); P[p + 'mlp.up_proj.weight'] = w(M, D)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
    d = os.path.join(out, 'arch_qwen3'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['Qwen3ForCausalLM'], model_type='qwen3', hidden_size=D, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=K, head_dim=Dh, intermediate_size=M, vocab_size=V,
               max_position_embeddings=ctx, rms_norm_eps=eps, rope_theta=theta, hidden_act='silu',
               attention_bias=False, attention_dropout=0.0, use_sliding_window=False, sliding_window=None,
               max_window_layers=L, rope_scaling=None, tie_word_embeddings=True, torch_dtype='float32')
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    # GGUF as llama.cpp's converter writes qwen3: no q/k permutation (NeoX RoPE), tied (no output.weight)
    kv = [('general.architecture', 'str', 'qwen3'), ('qwen3.context_length', 'u32', ctx),
          ('qwen3.embedding_length', 'u32', D), ('qwen3.block_count', 'u32', L),
          ('qwen3.feed_forward_length', 'u32', M), ('qwen3.attention.head_count', 'u32', H),
          ('qwen3.attention.head_count_kv', 'u32', K), ('qwen3.attention.key_length', 'u32', Dh),
          ('qwen3.attention.value_length', 'u32', Dh), ('qwen3.rope.freq_base', 'f32', theta),
          ('qwen3.attention.layer_norm_rms_epsilon', 'f32', eps)]
    T = [('token_embd.weight', P['model.embed_tokens.weight']), ('output_norm.weight', P['model.norm.weight'])]
    names = {'input_layernorm.weight': 'attn_norm.weight', 'self_attn.q_proj.weight': 'attn_q.weight',
             'self_attn.k_proj.weight': 'attn_k.weight', 'self_attn.v_proj.weight': 'attn_v.weight',
             'self_attn.q_norm.weight': 'attn_q_norm.weight', 'self_attn.k_norm.weight': 'attn_k_norm.weight',
             'self_attn.o_proj.weight': 'attn_output.weight',
             'post_attention_layernorm.weight': 'ffn_norm.weight', 'mlp.gate_proj.weight': 'ffn_gate.weight',
             'mlp.up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight'}
    for l in range(L):
        for hf, gg in names.items(): T.append((f'blk.{l}.{gg}', P[f'model.layers.{l}.{hf}']))
    write_gguf(os.path.join(out, 'arch_qwen3.gguf'), kv, T)

    # reference forward (modeling_qwen3.py's math, in float64)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    toks = [5, 61, 2, 40, 40, 13, 0, 27, 9, 52, 33, 18]
    n = len(toks)
    acts = {}
    def rms(x, wt):  # Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps) * weight over the last axis
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * wt
    inv = 1.0 / theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos(), emb.sin()
    def rot_half(x): return torch.cat([-x[..., Dh // 2:], x[..., :Dh // 2]], -1)
    x = t['model.embed_tokens.weight'][toks].unsqueeze(0)
    acts['hook_embed'] = x
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(L):
        p = f'model.layers.{l}.'
        b = f'blocks.{l}.'
        acts[b + 'hook_resid_pre'] = x
        h = rms(x, t[p + 'input_layernorm.weight']); acts[b + 'ln1.hook_normalized'] = h
        q = (h @ t[p + 'self_attn.q_proj.weight'].T).view(1, n, H, Dh)
        k = (h @ t[p + 'self_attn.k_proj.weight'].T).view(1, n, K, Dh)
        v = (h @ t[p + 'self_attn.v_proj.weight'].T).view(1, n, K, Dh)
        acts[b + 'attn.hook_q'] = to_adjacent(q, Dh); acts[b + 'attn.hook_k'] = to_adjacent(k, Dh)
        acts[b + 'attn.hook_v'] = v
        q = rms(q, t[p + 'self_attn.q_norm.weight'])   # per head, over head_dim, before RoPE
        k = rms(k, t[p + 'self_attn.k_norm.weight'])
        acts[b + 'attn.q_norm.hook_normalized'] = to_adjacent(q, Dh)
        acts[b + 'attn.k_norm.hook_normalized'] = to_adjacent(k, Dh)
        c4, s4 = cos[None, :, None, :], sin[None, :, None, :]
        rq = q * c4 + rot_half(q) * s4
        rk = k * c4 + rot_half(k) * s4
        acts[b + 'attn.hook_rot_q'] = to_adjacent(rq, Dh); acts[b + 'attn.hook_rot_k'] = to_adjacent(rk, Dh)
        kk = rk.repeat_interleave(H // K, dim=2); vv = v.repeat_interleave(H // K, dim=2)
        sc = torch.einsum('bthd,bshd->bhts', rq, kk) / Dh ** 0.5
        sc = sc.masked_fill(mask, float('-inf'))
        acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, vv); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, H * Dh) @ t[p + 'self_attn.o_proj.weight'].T; acts[b + 'hook_attn_out'] = ao
        x = x + ao; acts[b + 'hook_resid_mid'] = x
        h = rms(x, t[p + 'post_attention_layernorm.weight']); acts[b + 'ln2.hook_normalized'] = h
        g = h @ t[p + 'mlp.gate_proj.weight'].T; acts[b + 'mlp.hook_pre'] = g
        u = h @ t[p + 'mlp.up_proj.weight'].T; acts[b + 'mlp.hook_pre_linear'] = u
        a = torch.nn.functional.silu(g) * u; acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.down_proj.weight'].T; acts[b + 'hook_mlp_out'] = mo
        x = x + mo; acts[b + 'hook_resid_post'] = x
    h = rms(x, t['model.norm.weight']); acts['ln_final.hook_normalized'] = h
    logits = h @ t['model.embed_tokens.weight'].T   # tied
    write_golden(os.path.join(out, 'arch_qwen3.h5'), toks, logits, acts)


if __name__ == '__main__':
    qwen3(sys.argv[1] if len(sys.argv) > 1 else 'tests/data')
