#!/usr/bin/python3
"""make_arch_ref_gemma3.py — a small random Gemma 3 text model with reference
activations from an independent PyTorch float64 forward written here from
Hugging Face's published modeling_gemma3.py / configuration_gemma3.py, for
tests/test_gemma3.c.

The Hugging Face conventions reproduced (Gemma 2's, see
make_arch_ref_gemma.py, plus Gemma 3's):
  - Gemma3RMSNorm x * rsqrt(mean(x^2) + eps) * (1 + w) (the file stores w)
    on the residual norms, the post-norms and each head's q and k (q_norm /
    k_norm [head_dim], after the projections, before RoPE);
  - the embedding times sqrt(hidden_size) (Gemma3TextScaledWordEmbedding;
    cast to the weights' dtype: exact here, float32 / float64), tied head;
  - GeGLU gelu_pytorch_tanh; scores * query_pre_attn_scalar^-0.5; no soft
    caps (null, Gemma 3's default);
  - two RoPEs (Gemma3RotaryEmbedding): the sliding_attention layers with
    rope_local_base_freq and no scaling, the full_attention layers with
    rope_theta and rope_scaling (linear: inv_freq / factor);
  - the layer kinds: layer i full_attention when (i + 1) % sliding_window_pattern
    == 0 (configuration_gemma3's layer_types), the others masked to the last
    sliding_window keys (sliding_window_overlay: kv_idx > q_idx - W).

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref_gemma3.py tests/data

Files written (all small):
  arch_gemma3/config.json, model.safetensors   HF folder (gemma3_text,
      Gemma3ForCausalLM): d_model 32, 4 layers (sliding, sliding, full,
      sliding: sliding_window_pattern 3 and layer_types), 4 heads, 2 kv heads,
      head_dim 16, d_mlp 48, vocab 64, ctx 32, sliding_window 4 (< the 12
      tokens), rope_local_base_freq 100, rope_theta 1e6 with linear factor 8,
      query_pre_attn_scalar 24, eps 1e-6, tied, random norm / post-norm /
      q,k-norm weights (seed 31)
  arch_gemma3_mm/...     the same model as a gemma3 (Gemma3ForConditionalGeneration)
                         folder: text_config (some keys left to their defaults),
                         tensors language_model.model.* (the Hub's layout) and a
                         stand-in vision tensor
  arch_gemma3_mm2/...    the same with transformers' newer layout model.language_model.*
  arch_gemma3.gguf       as llama.cpp's convert_hf_to_gguf writes gemma3: every
                         norm.weight + 1 (q/k norms included), half-split q/k rows,
                         gemma3.attention.sliding_window 4, rope.scaling linear 8; plus
                         gemma3.attention.sliding_window_pattern (bools),
                         gemma3.rope.freq_base_swa and gemma3.attention.query_pre_attn_scalar
                         (llama.cpp hard-codes 6, 10000 and the head size)
  arch_gemma3.h5         golden run file: /tokens [1,12], /logits, /acts/<hook>
Writers: struct + json (make_arch_ref.py's), independent of mechprobe's.

Hook conventions as make_arch_ref_gemma.py: q/k hooks in adjacent-pair
channel order; attn.q_norm / k_norm.hook_normalized the normed q and k
(before RoPE); hook_attn_scores -inf where a key is masked (causal or
outside the window); hook_attn_out / hook_mlp_out the post-normed branch.
"""
import json, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_ref import write_safetensors, write_gguf  # noqa: E402  (the independent writers)
from make_arch_ref_gemma import write_golden, to_adjacent  # noqa: E402

torch.set_default_dtype(torch.float64)

D, L, H, K, Dh, M, V, CTX, EPS = 32, 4, 4, 2, 16, 48, 64, 32, 1e-6
THETA, FACTOR, LOCAL, PATTERN, W, QPAS = 1e6, 8.0, 100.0, 3, 4, 24.0
TYPES = ['full_attention' if (i + 1) % PATTERN == 0 else 'sliding_attention' for i in range(L)]


def make(seed):
    rng = np.random.default_rng(seed)
    def w(*s, sd=0.2): return (rng.standard_normal(s) * sd).astype(np.float32)
    def nw(*s): return (rng.standard_normal(s) * 0.3).astype(np.float32)   # the file's w (factor 1 + w)
    P = {'model.embed_tokens.weight': w(V, D, sd=0.5), 'model.norm.weight': nw(D)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D)
        P[p + 'self_attn.q_proj.weight'] = w(H * Dh, D, sd=0.5)
        P[p + 'self_attn.k_proj.weight'] = w(K * Dh, D, sd=0.5)
        P[p + 'self_attn.v_proj.weight'] = w(K * Dh, D)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'self_attn.q_norm.weight'] = nw(Dh)
        P[p + 'self_attn.k_norm.weight'] = nw(Dh)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        P[p + 'pre_feedforward_layernorm.weight'] = nw(D)
        P[p + 'post_feedforward_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_proj.weight'] = w(M, D, sd=0.3)
        P[p + 'mlp.up_proj.weight'] = w(M, D, sd=0.3)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
    return P


def text_config():
    return dict(model_type='gemma3_text', hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                num_key_value_heads=K, head_dim=Dh, intermediate_size=M, vocab_size=V, max_position_embeddings=CTX,
                rms_norm_eps=EPS, rope_theta=THETA, rope_local_base_freq=LOCAL,
                rope_scaling={'rope_type': 'linear', 'factor': FACTOR}, sliding_window=W,
                sliding_window_pattern=PATTERN, layer_types=TYPES, query_pre_attn_scalar=QPAS,
                attn_logit_softcapping=None, final_logit_softcapping=None, hidden_activation='gelu_pytorch_tanh',
                tie_word_embeddings=True, attention_bias=False, torch_dtype='float32')


def write_folders(out, P):
    d = os.path.join(out, 'arch_gemma3'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['Gemma3ForCausalLM'], **text_config())
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    # the multimodal folders: text_config without the keys whose Gemma3TextConfig defaults hold (eps, the
    # activation, tie); a stand-in vision tensor mechprobe leaves unread
    tc = text_config()
    for k in ('rms_norm_eps', 'hidden_activation', 'tie_word_embeddings', 'attention_bias', 'torch_dtype'):
        del tc[k]
    mm = dict(architectures=['Gemma3ForConditionalGeneration'], model_type='gemma3', text_config=tc,
              vision_config=dict(model_type='siglip_vision_model', hidden_size=8), mm_tokens_per_image=4,
              torch_dtype='float32')
    for name, lay in (('arch_gemma3_mm', lambda k: 'language_model.' + k),
                      ('arch_gemma3_mm2', lambda k: 'model.language_model.' + k[len('model.'):])):
        d = os.path.join(out, name); os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(mm, f, indent=2)
        T = {lay(k): v for k, v in P.items()}
        T[('' if name.endswith('mm') else 'model.') + 'vision_tower.vision_model.post_layernorm.weight'] = \
            np.ones(8, dtype=np.float32)
        write_safetensors(os.path.join(d, 'model.safetensors'), T)


def write_gguf_file(out, P):
    kv = [('general.architecture', 'str', 'gemma3'), ('gemma3.context_length', 'u32', CTX),
          ('gemma3.embedding_length', 'u32', D), ('gemma3.block_count', 'u32', L),
          ('gemma3.feed_forward_length', 'u32', M), ('gemma3.attention.head_count', 'u32', H),
          ('gemma3.attention.head_count_kv', 'u32', K), ('gemma3.attention.key_length', 'u32', Dh),
          ('gemma3.attention.value_length', 'u32', Dh), ('gemma3.rope.freq_base', 'f32', THETA),
          ('gemma3.attention.layer_norm_rms_epsilon', 'f32', EPS), ('gemma3.attention.sliding_window', 'u32', W),
          ('gemma3.rope.scaling.type', 'str', 'linear'), ('gemma3.rope.scaling.factor', 'f32', FACTOR),
          ('gemma3.attention.sliding_window_pattern', 'bools', [t == 'sliding_attention' for t in TYPES]),
          ('gemma3.rope.freq_base_swa', 'f32', LOCAL), ('gemma3.attention.query_pre_attn_scalar', 'f32', QPAS)]
    def g(k): return P[k] + 1.0 if k.endswith('norm.weight') else P[k]
    T = [('token_embd.weight', g('model.embed_tokens.weight')), ('output_norm.weight', g('model.norm.weight'))]
    names = {'input_layernorm.weight': 'attn_norm.weight', 'self_attn.q_proj.weight': 'attn_q.weight',
             'self_attn.k_proj.weight': 'attn_k.weight', 'self_attn.v_proj.weight': 'attn_v.weight',
             'self_attn.o_proj.weight': 'attn_output.weight', 'self_attn.q_norm.weight': 'attn_q_norm.weight',
             'self_attn.k_norm.weight': 'attn_k_norm.weight',
             'post_attention_layernorm.weight': 'post_attention_norm.weight',
             'pre_feedforward_layernorm.weight': 'ffn_norm.weight',
             'post_feedforward_layernorm.weight': 'post_ffw_norm.weight', 'mlp.gate_proj.weight': 'ffn_gate.weight',
             'mlp.up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight'}
    for l in range(L):
        for hf, gg in names.items(): T.append((f'blk.{l}.{gg}', g(f'model.layers.{l}.{hf}')))
    write_gguf(os.path.join(out, 'arch_gemma3.gguf'), kv, T)


def forward(P, toks):
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    n = len(toks)
    acts = {}
    def rms(x, wt): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + wt)
    def scale_of(x): return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    def gelu_tanh(x): return 0.5 * x * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    def tables(base, factor):   # compute_default_rope_parameters; linear: inv_freq / factor
        inv = 1.0 / base ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh) / factor
        emb = torch.cat([torch.outer(torch.arange(n, dtype=torch.float64), inv)] * 2, -1)
        return emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    rope = {'full_attention': tables(THETA, FACTOR), 'sliding_attention': tables(LOCAL, 1.0)}
    def rot_half(x): return torch.cat([-x[..., Dh // 2:], x[..., :Dh // 2]], -1)
    qi = torch.arange(n)[:, None]
    ki = torch.arange(n)[None, :]
    E = t['model.embed_tokens.weight']
    # the embed_scale buffer: torch.tensor(hidden_size ** 0.5) (float32), cast to the weights' dtype
    x = (E[toks] * torch.tensor(D ** 0.5, dtype=torch.float32).double()).unsqueeze(0)
    acts['hook_embed'] = x
    for l in range(L):
        p = f'model.layers.{l}.'
        b = f'blocks.{l}.'
        visible = ki <= qi
        if TYPES[l] == 'sliding_attention': visible = visible & (ki > qi - W)
        acts[b + 'hook_resid_pre'] = x
        h = rms(x, t[p + 'input_layernorm.weight']); acts[b + 'ln1.hook_normalized'] = h
        q = (h @ t[p + 'self_attn.q_proj.weight'].T).view(1, n, H, Dh)
        k = (h @ t[p + 'self_attn.k_proj.weight'].T).view(1, n, K, Dh)
        v = (h @ t[p + 'self_attn.v_proj.weight'].T).view(1, n, K, Dh)
        acts[b + 'attn.hook_q'] = to_adjacent(q, Dh); acts[b + 'attn.hook_k'] = to_adjacent(k, Dh)
        acts[b + 'attn.hook_v'] = v
        q = rms(q, t[p + 'self_attn.q_norm.weight']); k = rms(k, t[p + 'self_attn.k_norm.weight'])
        acts[b + 'attn.q_norm.hook_normalized'] = to_adjacent(q, Dh)
        acts[b + 'attn.k_norm.hook_normalized'] = to_adjacent(k, Dh)
        c4, s4 = rope[TYPES[l]]
        rq = q * c4 + rot_half(q) * s4
        rk = k * c4 + rot_half(k) * s4
        acts[b + 'attn.hook_rot_q'] = to_adjacent(rq, Dh); acts[b + 'attn.hook_rot_k'] = to_adjacent(rk, Dh)
        kk = rk.repeat_interleave(H // K, dim=2); vv = v.repeat_interleave(H // K, dim=2)
        sc = torch.einsum('bthd,bshd->bhts', rq, kk) * QPAS ** -0.5
        sc = sc.masked_fill(~visible, float('-inf'))
        acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, vv); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, H * Dh) @ t[p + 'self_attn.o_proj.weight'].T
        acts[b + 'ln1_post.hook_scale'] = scale_of(ao)
        ao = rms(ao, t[p + 'post_attention_layernorm.weight'])
        acts[b + 'ln1_post.hook_normalized'] = ao
        acts[b + 'hook_attn_out'] = ao
        x = x + ao; acts[b + 'hook_resid_mid'] = x
        h = rms(x, t[p + 'pre_feedforward_layernorm.weight']); acts[b + 'ln2.hook_normalized'] = h
        gt = h @ t[p + 'mlp.gate_proj.weight'].T; acts[b + 'mlp.hook_pre'] = gt
        u = h @ t[p + 'mlp.up_proj.weight'].T; acts[b + 'mlp.hook_pre_linear'] = u
        a = gelu_tanh(gt) * u; acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.down_proj.weight'].T
        acts[b + 'ln2_post.hook_scale'] = scale_of(mo)
        mo = rms(mo, t[p + 'post_feedforward_layernorm.weight'])
        acts[b + 'ln2_post.hook_normalized'] = mo
        acts[b + 'hook_mlp_out'] = mo
        x = x + mo; acts[b + 'hook_resid_post'] = x
    h = rms(x, t['model.norm.weight']); acts['ln_final.hook_normalized'] = h
    return h @ E.T, acts


if __name__ == '__main__':
    out = sys.argv[1] if len(sys.argv) > 1 else 'tests/data'
    P = make(31)
    write_folders(out, P)
    write_gguf_file(out, P)
    toks = [3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33]
    logits, acts = forward(P, toks)
    write_golden(os.path.join(out, 'arch_gemma3.h5'), toks, logits, acts)
