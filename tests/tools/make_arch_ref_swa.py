#!/usr/bin/python3
"""make_arch_ref_swa.py — a small random Mistral with sliding-window attention
and reference activations from an independent PyTorch forward written here
from Hugging Face's published Mistral code (modeling_mistral.py: RMSNorm,
half-split rotate_half RoPE, grouped-query attention, SwiGLU; the mask of
masking_utils.py: causal `kv_idx <= q_idx` and sliding_window_overlay
`kv_idx > q_idx - sliding_window`), in float64, for tests/test_swa.c.
Plus the Gemma-2-style per-layer pattern on the same weights: layer l is
global when (l + 1) % 2 == 0 (configuration_gemma2.py's layer_types), else
windowed.

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_swa.py tests/data

Files written (all small):
  swa_mistral/config.json, swa_mistral/model.safetensors   HF folder (mistral):
      d_model 32, 2 layers, 4 heads, 2 kv heads, d_head 8, d_mlp 48, vocab 64,
      ctx 32, rope_theta 1e4, rms eps 1e-5, sliding_window 5, untied,
      randomised norm weights (seed 23)
  swa_mistral.h5      golden run file: /tokens [1,16], /logits, /acts/<hook>
                      (every block's hook_resid_post, hook_attn_scores,
                      hook_pattern), every layer windowed
  swa_pattern.gguf    the same weights as llama.cpp's converter writes a llama
                      (q/k rows permuted to adjacent pairs) with
                      llama.attention.sliding_window = 5 and
                      llama.attention.sliding_window_pattern = [true, false]
                      (one bool per layer, true: windowed)
  swa_pattern.h5      golden run file of the pattern model (layer 0 windowed,
                      layer 1 global)
The safetensors and GGUF files are written by the independent writers below
(struct + json), not by mechprobe's.
"""
import json, os, struct, sys
import numpy as np
import torch
import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref import write_safetensors, gguf_str, write_gguf  # noqa: E402  (the independent writers)

torch.set_default_dtype(torch.float64)   # reference in double, stored as float32

D, L, H, K, Dh, M, V, CTX, THETA, EPS, W = 32, 2, 4, 2, 8, 48, 64, 32, 1e4, 1e-5, 5
TOKS = [5, 41, 17, 63, 2, 2, 30, 11, 58, 7, 0, 44, 23, 36, 9, 51]

# ---------------- independent writers ----------------

def write_golden(path, tokens, logits, acts, windows):
    with h5py.File(path, 'w') as f:
        f.attrs['format'] = 'mechprobe.run'
        f.attrs['version'] = 1
        f.attrs['windows'] = np.array(windows, dtype=np.int32)   # per layer, 0: global
        f.create_dataset('tokens', data=np.array([tokens], dtype=np.int32))
        f.create_dataset('logits', data=logits.detach().numpy().astype(np.float32))
        g = f.create_group('acts')
        for k, v in acts.items():
            g.create_dataset(k, data=v.detach().numpy().astype(np.float32))

def permute_rows_gguf(w, n_head):
    """llama.cpp convert_hf_to_gguf's permute for llama q/k: half-split rows -> adjacent pairs."""
    return w.reshape(n_head, 2, Dh // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

# ---------------- the model ----------------

def weights():
    rng = np.random.default_rng(23)
    def w(*s): return (rng.standard_normal(s) * 0.25).astype(np.float32)
    def nw(*s): return (1.0 + rng.standard_normal(s) * 0.2).astype(np.float32)   # randomised norm weights
    P = {'model.embed_tokens.weight': w(V, D), 'model.norm.weight': nw(D), 'lm_head.weight': w(V, D)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D)
        P[p + 'self_attn.q_proj.weight'] = w(H * Dh, D)
        P[p + 'self_attn.k_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.v_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_proj.weight'] = w(M, D); P[p + 'mlp.up_proj.weight'] = w(M, D)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
    return P

def forward(P, toks, windows):
    """HF Mistral's forward; windows[l] = W of layer l (0: full causal)."""
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    n = len(toks)
    acts = {}
    def rms(x, wt): return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))
    inv = 1.0 / THETA ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos(), emb.sin()
    def rot_half(x): return torch.cat([-x[..., Dh // 2:], x[..., :Dh // 2]], -1)
    qi = torch.arange(n)[:, None]
    ki = torch.arange(n)[None, :]
    x = t['model.embed_tokens.weight'][toks].unsqueeze(0)
    for l in range(L):
        p = f'model.layers.{l}.'
        b = f'blocks.{l}.'
        visible = ki <= qi                                   # causal_mask_function
        if windows[l] > 0: visible = visible & (ki > qi - windows[l])   # sliding_window_overlay
        h = rms(x, t[p + 'input_layernorm.weight'])
        q = (h @ t[p + 'self_attn.q_proj.weight'].T).view(1, n, H, Dh)
        k = (h @ t[p + 'self_attn.k_proj.weight'].T).view(1, n, K, Dh)
        v = (h @ t[p + 'self_attn.v_proj.weight'].T).view(1, n, K, Dh)
        c4, s4 = cos[None, :, None, :], sin[None, :, None, :]
        rq = q * c4 + rot_half(q) * s4
        rk = k * c4 + rot_half(k) * s4
        kk = rk.repeat_interleave(H // K, dim=2); vv = v.repeat_interleave(H // K, dim=2)
        sc = torch.einsum('bthd,bshd->bhts', rq, kk) / Dh ** 0.5
        sc = sc.masked_fill(~visible, float('-inf'))
        acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, vv)
        x = x + z.reshape(1, n, H * Dh) @ t[p + 'self_attn.o_proj.weight'].T
        h = rms(x, t[p + 'post_attention_layernorm.weight'])
        a = torch.nn.functional.silu(h @ t[p + 'mlp.gate_proj.weight'].T) * (h @ t[p + 'mlp.up_proj.weight'].T)
        x = x + a @ t[p + 'mlp.down_proj.weight'].T
        acts[b + 'hook_resid_post'] = x
    logits = rms(x, t['model.norm.weight']) @ t['lm_head.weight'].T
    return logits, acts

def main(out):
    P = weights()
    d = os.path.join(out, 'swa_mistral'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['MistralForCausalLM'], model_type='mistral', hidden_size=D, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=K, head_dim=Dh, intermediate_size=M, vocab_size=V,
               max_position_embeddings=CTX, rms_norm_eps=EPS, rope_theta=THETA, hidden_act='silu',
               sliding_window=W, tie_word_embeddings=False, torch_dtype='float32')
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    logits, acts = forward(P, TOKS, [W] * L)
    write_golden(os.path.join(out, 'swa_mistral.h5'), TOKS, logits, acts, [W] * L)

    # the Gemma-2-style pattern (P = 2): layer 0 windowed, layer 1 global
    pattern = [W if (l + 1) % 2 else 0 for l in range(L)]
    kv = [('general.architecture', 'str', 'llama'), ('llama.context_length', 'u32', CTX),
          ('llama.embedding_length', 'u32', D), ('llama.block_count', 'u32', L),
          ('llama.feed_forward_length', 'u32', M), ('llama.attention.head_count', 'u32', H),
          ('llama.attention.head_count_kv', 'u32', K), ('llama.rope.freq_base', 'f32', THETA),
          ('llama.attention.layer_norm_rms_epsilon', 'f32', EPS), ('llama.attention.sliding_window', 'u32', W),
          ('llama.attention.sliding_window_pattern', 'bools', [w > 0 for w in pattern])]
    T = [('token_embd.weight', P['model.embed_tokens.weight']), ('output_norm.weight', P['model.norm.weight']),
         ('output.weight', P['lm_head.weight'])]
    names = {'input_layernorm.weight': 'attn_norm.weight', 'self_attn.q_proj.weight': 'attn_q.weight',
             'self_attn.k_proj.weight': 'attn_k.weight', 'self_attn.v_proj.weight': 'attn_v.weight',
             'self_attn.o_proj.weight': 'attn_output.weight', 'post_attention_layernorm.weight': 'ffn_norm.weight',
             'mlp.gate_proj.weight': 'ffn_gate.weight', 'mlp.up_proj.weight': 'ffn_up.weight',
             'mlp.down_proj.weight': 'ffn_down.weight'}
    for l in range(L):
        for hf, gg in names.items():
            a = P[f'model.layers.{l}.{hf}']
            if hf == 'self_attn.q_proj.weight': a = permute_rows_gguf(a, H)
            if hf == 'self_attn.k_proj.weight': a = permute_rows_gguf(a, K)
            T.append((f'blk.{l}.{gg}', a))
    write_gguf(os.path.join(out, 'swa_pattern.gguf'), kv, T)
    logits, acts = forward(P, TOKS, pattern)
    write_golden(os.path.join(out, 'swa_pattern.h5'), TOKS, logits, acts, pattern)

if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'tests/data')
