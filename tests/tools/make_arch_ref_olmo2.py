#!/usr/bin/python3
"""make_arch_ref_olmo2.py — a small random OLMo 2 model with reference
activations from an independent PyTorch float64 forward written here from
Hugging Face's published modeling_olmo2.py (and configuration_olmo2.py), for
tests/test_olmo2.c.

The Hugging Face conventions reproduced (Olmo2DecoderLayer, Olmo2Attention):
  - no norm before attention or MLP: both read the residual stream itself;
  - q = q_norm(q_proj(x)), k = k_norm(k_proj(x)): RMSNorms over the WHOLE
    projection (widths num_attention_heads * head_dim and
    num_key_value_heads * head_dim), before the half-split (rotate_half) RoPE;
  - the attention output through post_attention_layernorm before it is added
    to the residual, the SwiGLU MLP's output through post_feedforward_layernorm;
  - Olmo2RMSNorm: w * x * rsqrt(mean(x^2) + eps) (plain weight, no 1 + w);
  - the final norm, an untied lm_head (tie_word_embeddings false).

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_olmo2.py tests/data

Files written (all small):
  arch_olmo2/config.json, arch_olmo2/model.safetensors   HF folder (olmo2):
      d_model 32, 2 layers, 4 heads, 2 kv heads (the k norm is K*Dh = 16 wide,
      the q norm 32), head_dim 8, d_mlp 48, vocab 64, ctx 32, rope_theta
      500000, rms_norm_eps 1e-6, untied, every norm weight random (seed 31)
  arch_olmo2.gguf        as llama.cpp's convert_hf_to_gguf writes olmo2: q/k
                         rows half-split as in HF (NeoX RoPE), attn_q_norm [32],
                         attn_k_norm [16], post_attention_norm, post_ffw_norm,
                         no attn_norm / ffn_norm, output.weight
  arch_olmo2.h5          golden run file: /tokens [1,12], /logits, /acts/<hook>
Writers: tests/tools/make_arch_ref.py's (struct + json, independent of mechprobe's).

Hook conventions (mechprobe's, as tests/tools/make_arch_ref.py): q/k hooks in
adjacent-pair channel order; attn.hook_q / hook_k the projections,
attn.q_norm / k_norm.hook_normalized after their norm; hook_attn_scores with
-inf above the diagonal; hook_attn_out / hook_mlp_out the post-normed branch
output (what is added to the residual), equal to ln1_post / ln2_post
.hook_normalized; ln*_post.hook_scale = sqrt(mean(x^2) + eps); no ln1.* /
ln2.* points (the block has no pre-norms).
"""
import json, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref import write_safetensors, write_gguf, write_golden, to_adjacent  # noqa: E402

torch.set_default_dtype(torch.float64)

D, L, H, K, Dh, M, V, CTX, THETA, EPS = 32, 2, 4, 2, 8, 48, 64, 32, 500000.0, 1e-6


def make(seed):
    rng = np.random.default_rng(seed)
    def w(*s, sd=0.2): return (rng.standard_normal(s) * sd).astype(np.float32)
    def nw(*s): return (1.0 + rng.standard_normal(s) * 0.3).astype(np.float32)   # a norm's weight, around 1
    P = {'model.embed_tokens.weight': w(V, D, sd=0.5), 'model.norm.weight': nw(D), 'lm_head.weight': w(V, D, sd=0.5)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'self_attn.q_proj.weight'] = w(H * Dh, D, sd=0.4)
        P[p + 'self_attn.k_proj.weight'] = w(K * Dh, D, sd=0.4)
        P[p + 'self_attn.v_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'self_attn.q_norm.weight'] = nw(H * Dh)
        P[p + 'self_attn.k_norm.weight'] = nw(K * Dh)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_proj.weight'] = w(M, D, sd=0.3)
        P[p + 'mlp.up_proj.weight'] = w(M, D, sd=0.3)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
        P[p + 'post_feedforward_layernorm.weight'] = nw(D)
    return P


def olmo2(out):
    P = make(31)
    d = os.path.join(out, 'arch_olmo2'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['Olmo2ForCausalLM'], model_type='olmo2', hidden_size=D, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=K, intermediate_size=M, vocab_size=V,
               max_position_embeddings=CTX, rms_norm_eps=EPS, rope_theta=THETA, rope_scaling=None, hidden_act='silu',
               attention_bias=False, attention_dropout=0.0, tie_word_embeddings=False, torch_dtype='float32')
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)

    # GGUF as llama.cpp's converter writes olmo2 (Olmo2Model: no row permutation; LLM_ARCH_OLMO2 runs NeoX RoPE)
    kv = [('general.architecture', 'str', 'olmo2'), ('olmo2.context_length', 'u32', CTX),
          ('olmo2.embedding_length', 'u32', D), ('olmo2.block_count', 'u32', L),
          ('olmo2.feed_forward_length', 'u32', M), ('olmo2.attention.head_count', 'u32', H),
          ('olmo2.attention.head_count_kv', 'u32', K), ('olmo2.rope.freq_base', 'f32', THETA),
          ('olmo2.attention.layer_norm_rms_epsilon', 'f32', EPS)]
    T = [('token_embd.weight', P['model.embed_tokens.weight']), ('output_norm.weight', P['model.norm.weight']),
         ('output.weight', P['lm_head.weight'])]
    names = {'self_attn.q_proj.weight': 'attn_q.weight', 'self_attn.k_proj.weight': 'attn_k.weight',
             'self_attn.v_proj.weight': 'attn_v.weight', 'self_attn.o_proj.weight': 'attn_output.weight',
             'self_attn.q_norm.weight': 'attn_q_norm.weight', 'self_attn.k_norm.weight': 'attn_k_norm.weight',
             'post_attention_layernorm.weight': 'post_attention_norm.weight',
             'mlp.gate_proj.weight': 'ffn_gate.weight', 'mlp.up_proj.weight': 'ffn_up.weight',
             'mlp.down_proj.weight': 'ffn_down.weight', 'post_feedforward_layernorm.weight': 'post_ffw_norm.weight'}
    for l in range(L):
        for hf, gg in names.items(): T.append((f'blk.{l}.{gg}', P[f'model.layers.{l}.{hf}']))
    write_gguf(os.path.join(out, 'arch_olmo2.gguf'), kv, T)

    # ---- the reference forward (float64) ----
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    toks = [3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33]
    n = len(toks)
    acts = {}
    def scale_of(x): return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    def rms(x, wt): return wt * (x / scale_of(x))
    inv = 1.0 / THETA ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    def rot_half(x): return torch.cat([-x[..., Dh // 2:], x[..., :Dh // 2]], -1)
    x = t['model.embed_tokens.weight'][toks].unsqueeze(0)
    acts['hook_embed'] = x
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(L):
        p = f'model.layers.{l}.'
        b = f'blocks.{l}.'
        acts[b + 'hook_resid_pre'] = x
        q = x @ t[p + 'self_attn.q_proj.weight'].T       # [1, n, H*Dh]: the residual itself, no norm
        k = x @ t[p + 'self_attn.k_proj.weight'].T
        v = x @ t[p + 'self_attn.v_proj.weight'].T
        acts[b + 'attn.hook_q'] = to_adjacent(q.view(1, n, H, Dh), Dh)
        acts[b + 'attn.hook_k'] = to_adjacent(k.view(1, n, K, Dh), Dh)
        acts[b + 'attn.hook_v'] = v.view(1, n, K, Dh)
        q = rms(q, t[p + 'self_attn.q_norm.weight']).view(1, n, H, Dh)   # over the whole projection
        k = rms(k, t[p + 'self_attn.k_norm.weight']).view(1, n, K, Dh)
        v = v.view(1, n, K, Dh)
        acts[b + 'attn.q_norm.hook_normalized'] = to_adjacent(q, Dh)
        acts[b + 'attn.k_norm.hook_normalized'] = to_adjacent(k, Dh)
        rq = q * cos + rot_half(q) * sin
        rk = k * cos + rot_half(k) * sin
        acts[b + 'attn.hook_rot_q'] = to_adjacent(rq, Dh); acts[b + 'attn.hook_rot_k'] = to_adjacent(rk, Dh)
        kk = rk.repeat_interleave(H // K, dim=2); vv = v.repeat_interleave(H // K, dim=2)
        sc = torch.einsum('bthd,bshd->bhts', rq, kk) * Dh ** -0.5
        sc = sc.masked_fill(mask, float('-inf'))
        acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, vv); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, H * Dh) @ t[p + 'self_attn.o_proj.weight'].T
        acts[b + 'ln1_post.hook_scale'] = scale_of(ao)
        ao = rms(ao, t[p + 'post_attention_layernorm.weight'])
        acts[b + 'ln1_post.hook_normalized'] = ao
        acts[b + 'hook_attn_out'] = ao
        x = x + ao; acts[b + 'hook_resid_mid'] = x
        acts[b + 'hook_mlp_in'] = x
        gt = x @ t[p + 'mlp.gate_proj.weight'].T; acts[b + 'mlp.hook_pre'] = gt
        u = x @ t[p + 'mlp.up_proj.weight'].T; acts[b + 'mlp.hook_pre_linear'] = u
        a = torch.nn.functional.silu(gt) * u; acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.down_proj.weight'].T
        acts[b + 'ln2_post.hook_scale'] = scale_of(mo)
        mo = rms(mo, t[p + 'post_feedforward_layernorm.weight'])
        acts[b + 'ln2_post.hook_normalized'] = mo
        acts[b + 'hook_mlp_out'] = mo
        x = x + mo; acts[b + 'hook_resid_post'] = x
    acts['ln_final.hook_scale'] = scale_of(x)
    h = rms(x, t['model.norm.weight']); acts['ln_final.hook_normalized'] = h
    logits = h @ t['lm_head.weight'].T
    write_golden(os.path.join(out, 'arch_olmo2.h5'), toks, logits, acts)


if __name__ == '__main__':
    olmo2(sys.argv[1] if len(sys.argv) > 1 else 'tests/data')
