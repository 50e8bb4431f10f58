#!/usr/bin/python3
"""make_arch_ref_gemma.py — small random Gemma (1) and Gemma 2 models with
reference activations from an independent PyTorch float64 forward written
here from Hugging Face's published modeling_gemma.py / modeling_gemma2.py
(and their configuration classes), for tests/test_gemma.c.

The Hugging Face conventions reproduced:
  - GemmaRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w) (the file stores w);
  - the embedding multiplied by sqrt(hidden_size) (the "normalizer");
    tied classifier (the unscaled embedding);
  - GeGLU: down(gelu_pytorch_tanh(gate(x)) * up(x));
  - head_dim independent of hidden_size / num_attention_heads; half-split
    (rotate_half) RoPE;
  - Gemma 2: scores = (q k^T) * query_pre_attn_scalar^-0.5, then
    attn_logit_softcapping * tanh(scores / cap) before the causal mask;
    post_attention_layernorm on the attention output and
    post_feedforward_layernorm on the MLP output before each is added to the
    residual, pre_feedforward_layernorm as the MLP's input norm; logits
    final_logit_softcapping * tanh(logits / cap).
The sliding window of Gemma 2's alternate layers is not exercised:
sliding_window = max_position_embeddings = 32 makes it a no-op (mechprobe
refuses a narrower window until it implements it).

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_gemma.py tests/data

Files written (all small):
  arch_gemma/config.json, arch_gemma/model.safetensors   HF folder (gemma):
      d_model 32, 2 layers, 4 heads, 2 kv heads, head_dim 16 (H*Dh = 64 != 32),
      d_mlp 48, vocab 64, ctx 32, rope_theta 10000, eps 1e-6, tied (seed 21)
  arch_gemma.gguf        as llama.cpp's convert_hf_to_gguf writes gemma: norm
                         weights + 1, half-split q/k rows (NeoX RoPE), no output.weight
  arch_gemma.h5          golden run file: /tokens [1,12], /logits, /acts/<hook>
  arch_gemma2/...        the same dimensions for gemma2 with attn cap 5.0,
      final cap 3.0, query_pre_attn_scalar 24 (!= head_dim 16), random
      post-norm weights (seed 23)
  arch_gemma2.gguf       gemma2 keys gemma2.attn_logit_softcapping,
                         gemma2.final_logit_softcapping, gemma2.attention.sliding_window,
                         mechprobe's gemma2.attention.query_pre_attn_scalar;
                         tensors blk.N.post_attention_norm, blk.N.post_ffw_norm
  arch_gemma2.h5         golden run file
Writers: struct + json, independent of mechprobe's.

Hook conventions (mechprobe's, as tests/tools/make_arch_ref.py): q/k hooks in
adjacent-pair channel order; hook_attn_scores capped, then -inf above the
diagonal; hook_embed the scaled embedding (TransformerLens's W_E is the scaled
table, so its hook_embed is too); ln*.hook_normalized the norm's output
(weight included); hook_attn_out / hook_mlp_out the post-normed branch output
(TransformerLens applies ln1_post / ln2_post before those hooks), equal to
ln1_post / ln2_post.hook_normalized; ln*_post.hook_scale = sqrt(mean(x^2)+eps).
"""
import json, os, struct, sys
import numpy as np
import torch
import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref import write_safetensors, gguf_str, write_gguf  # noqa: E402  (the independent writers)

torch.set_default_dtype(torch.float64)

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

def to_adjacent(x, Dh):
    """[..., nh, Dh] half-split channels (i, i + Dh/2) -> adjacent pairs (2i, 2i+1)."""
    shp = x.shape
    return x.reshape(*shp[:-1], 2, Dh // 2).transpose(-1, -2).reshape(shp)

# ---------------- the models ----------------

D, L, H, K, Dh, M, V, CTX, THETA, EPS = 32, 2, 4, 2, 16, 48, 64, 32, 10000.0, 1e-6

def make(gemma2, seed):
    rng = np.random.default_rng(seed)
    def w(*s, sd=0.2): return (rng.standard_normal(s) * sd).astype(np.float32)
    def nw(*s): return (rng.standard_normal(s) * 0.3).astype(np.float32)   # the file's w (factor 1 + w)
    P = {'model.embed_tokens.weight': w(V, D, sd=0.5), 'model.norm.weight': nw(D)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D)
        P[p + 'self_attn.q_proj.weight'] = w(H * Dh, D, sd=0.5)   # large q/k: scores the cap bends
        P[p + 'self_attn.k_proj.weight'] = w(K * Dh, D, sd=0.5)
        P[p + 'self_attn.v_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        if gemma2:
            P[p + 'pre_feedforward_layernorm.weight'] = nw(D)
            P[p + 'post_feedforward_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_proj.weight'] = w(M, D, sd=0.3)
        P[p + 'mlp.up_proj.weight'] = w(M, D, sd=0.3)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
    return P

def gemma(out, gemma2):
    name = 'gemma2' if gemma2 else 'gemma'
    ACAP, FCAP, QPAS = (5.0, 3.0, 24.0) if gemma2 else (None, None, Dh)
    P = make(gemma2, 23 if gemma2 else 21)
    d = os.path.join(out, 'arch_' + name); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['Gemma2ForCausalLM' if gemma2 else 'GemmaForCausalLM'], model_type=name,
               hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=K, head_dim=Dh,
               intermediate_size=M, vocab_size=V, max_position_embeddings=CTX, rms_norm_eps=EPS, rope_theta=THETA,
               hidden_act='gelu_pytorch_tanh', hidden_activation='gelu_pytorch_tanh', tie_word_embeddings=True,
               attention_bias=False, torch_dtype='float32')
    if gemma2:
        cfg.update(attn_logit_softcapping=ACAP, final_logit_softcapping=FCAP, query_pre_attn_scalar=QPAS,
                   sliding_window=CTX)
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)

    # GGUF as llama.cpp's converter writes gemma / gemma2: "norm.weight" tensors + 1, q/k rows as in HF (NeoX)
    kv = [('general.architecture', 'str', name), (name + '.context_length', 'u32', CTX),
          (name + '.embedding_length', 'u32', D), (name + '.block_count', 'u32', L),
          (name + '.feed_forward_length', 'u32', M), (name + '.attention.head_count', 'u32', H),
          (name + '.attention.head_count_kv', 'u32', K), (name + '.attention.key_length', 'u32', Dh),
          (name + '.attention.value_length', 'u32', Dh), (name + '.rope.freq_base', 'f32', THETA),
          (name + '.attention.layer_norm_rms_epsilon', 'f32', EPS)]
    if gemma2:
        kv += [('gemma2.attn_logit_softcapping', 'f32', ACAP), ('gemma2.final_logit_softcapping', 'f32', FCAP),
               ('gemma2.attention.sliding_window', 'u32', CTX),
               ('gemma2.attention.query_pre_attn_scalar', 'f32', QPAS)]
    def g(k): return P[k] + 1.0 if k.endswith('norm.weight') else P[k]
    T = [('token_embd.weight', g('model.embed_tokens.weight')), ('output_norm.weight', g('model.norm.weight'))]
    names = {'input_layernorm.weight': 'attn_norm.weight', 'self_attn.q_proj.weight': 'attn_q.weight',
             'self_attn.k_proj.weight': 'attn_k.weight', 'self_attn.v_proj.weight': 'attn_v.weight',
             'self_attn.o_proj.weight': 'attn_output.weight', 'mlp.gate_proj.weight': 'ffn_gate.weight',
             'mlp.up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight'}
    if gemma2:
        names.update({'post_attention_layernorm.weight': 'post_attention_norm.weight',
                      'pre_feedforward_layernorm.weight': 'ffn_norm.weight',
                      'post_feedforward_layernorm.weight': 'post_ffw_norm.weight'})
    else:
        names['post_attention_layernorm.weight'] = 'ffn_norm.weight'
    for l in range(L):
        for hf, gg in names.items(): T.append((f'blk.{l}.{gg}', g(f'model.layers.{l}.{hf}')))
    write_gguf(os.path.join(out, f'arch_{name}.gguf'), kv, T)

    # ---- the reference forward (float64) ----
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    toks = [3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33]
    n = len(toks)
    acts = {}
    def rms(x, wt): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + wt)
    def scale_of(x): return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    def gelu_tanh(x): return 0.5 * x * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    inv = 1.0 / THETA ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos(), emb.sin()
    def rot_half(x): return torch.cat([-x[..., Dh // 2:], x[..., :Dh // 2]], -1)
    E = t['model.embed_tokens.weight']
    x = (E[toks] * torch.tensor(D ** 0.5, dtype=torch.float32).double()).unsqueeze(0)   # HF's normalizer
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
        c4, s4 = cos[None, :, None, :], sin[None, :, None, :]
        rq = q * c4 + rot_half(q) * s4
        rk = k * c4 + rot_half(k) * s4
        acts[b + 'attn.hook_rot_q'] = to_adjacent(rq, Dh); acts[b + 'attn.hook_rot_k'] = to_adjacent(rk, Dh)
        kk = rk.repeat_interleave(H // K, dim=2); vv = v.repeat_interleave(H // K, dim=2)
        sc = torch.einsum('bthd,bshd->bhts', rq, kk) * QPAS ** -0.5
        if ACAP: sc = ACAP * torch.tanh(sc / ACAP)
        sc = sc.masked_fill(mask, float('-inf'))
        acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, vv); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, H * Dh) @ t[p + 'self_attn.o_proj.weight'].T
        if gemma2:
            acts[b + 'ln1_post.hook_scale'] = scale_of(ao)
            ao = rms(ao, t[p + 'post_attention_layernorm.weight'])
            acts[b + 'ln1_post.hook_normalized'] = ao
        acts[b + 'hook_attn_out'] = ao
        x = x + ao; acts[b + 'hook_resid_mid'] = x
        h = rms(x, t[p + ('pre_feedforward_layernorm.weight' if gemma2 else 'post_attention_layernorm.weight')])
        acts[b + 'ln2.hook_normalized'] = h
        gt = h @ t[p + 'mlp.gate_proj.weight'].T; acts[b + 'mlp.hook_pre'] = gt
        u = h @ t[p + 'mlp.up_proj.weight'].T; acts[b + 'mlp.hook_pre_linear'] = u
        a = gelu_tanh(gt) * u; acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.down_proj.weight'].T
        if gemma2:
            acts[b + 'ln2_post.hook_scale'] = scale_of(mo)
            mo = rms(mo, t[p + 'post_feedforward_layernorm.weight'])
            acts[b + 'ln2_post.hook_normalized'] = mo
        acts[b + 'hook_mlp_out'] = mo
        x = x + mo; acts[b + 'hook_resid_post'] = x
    h = rms(x, t['model.norm.weight']); acts['ln_final.hook_normalized'] = h
    logits = h @ E.T
    if FCAP: logits = FCAP * torch.tanh(logits / FCAP)
    write_golden(os.path.join(out, f'arch_{name}.h5'), toks, logits, acts)

if __name__ == '__main__':
    out = sys.argv[1] if len(sys.argv) > 1 else 'tests/data'
    gemma(out, False)
    gemma(out, True)
