#!/usr/bin/python3
"""make_arch_ref.py — small random Qwen2 and GPT-2 models with reference
activations from an independent PyTorch implementation written here (the
Hugging Face conventions: half-split rotate_half RoPE with q/k/v biases for
Qwen2; Conv1D weights, fused c_attn, learned positions, LayerNorm and
GELU-tanh ("gelu_new") for GPT-2), for tests/test_models.c.

Exact command (repository root, Debian's python3 with numpy, torch, h5py):

  /usr/bin/python3 tests/tools/make_arch_ref.py tests/data

Files written (all small):
  arch_qwen2/config.json, arch_qwen2/model.safetensors   HF folder (qwen2):
      d_model 32, 2 layers, 4 heads, 2 kv heads, d_head 8, d_mlp 48, vocab 64,
      ctx 32, rope_theta 1e6, rms eps 1e-6, untied classifier (seed 7)
  arch_qwen2.gguf        the same weights as llama.cpp's converter writes them
                         (general.architecture qwen2, half-split q/k rows: NeoX RoPE)
  arch_qwen2.h5          golden run file: /tokens [1,12], /logits, /acts/<hook>
  arch_gpt2/config.json, arch_gpt2/model.safetensors    HF folder (gpt2):
      d_model 32, 2 layers, 4 heads, d_mlp 64, vocab 64, n_positions 16, tied
      (seed 11)
  arch_gpt2.gguf         llama.cpp naming (attn_qkv fused, position_embd)
  arch_gpt2.h5           golden run file
The GGUF and safetensors files are written by the independent writers below
(struct + json), not by mechprobe's.

Hook conventions: q/k hooks (hook_q, hook_k, hook_rot_q, hook_rot_k) are
stored in mechprobe's channel order, adjacent RoPE pairs (2i, 2i+1), i.e. the
reference's half-split channels (i, i + Dh/2) interleaved; hook_attn_scores
is masked with -inf above the diagonal; GPT-2's hook_embed is token + position
embedding and its rot_q/rot_k equal q/k (no RoPE).
"""
import json, os, struct, sys
import numpy as np
import torch
import h5py

torch.set_default_dtype(torch.float64)   # reference in double, stored as float32

# ---------------- independent writers ----------------

def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype='<f4')
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in blobs: f.write(b)

def gguf_str(s):
    b = s.encode()
    return struct.pack('<Q', len(b)) + b

def write_gguf(path, kv, tensors):
    """kv: list of (key, type, value); types 'u32', 'f32', 'str', 'bool',
    'bools' (an array of GGUF bools). tensors: list of (name, float32 array in
    PyTorch order) -> ggml dims reversed. The other make_arch_ref_*.py scripts
    import these writers."""
    out = bytearray(b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kv)))
    for k, t, v in kv:
        out += gguf_str(k)
        if t == 'u32': out += struct.pack('<II', 4, v)
        elif t == 'f32': out += struct.pack('<If', 6, v)
        elif t == 'str': out += struct.pack('<I', 8) + gguf_str(v)
        elif t == 'bool': out += struct.pack('<IB', 7, 1 if v else 0)
        elif t == 'bools': out += struct.pack('<IIQ', 9, 7, len(v)) + bytes(1 if b else 0 for b in v)
        else: raise ValueError(t)
    off, datas = 0, []
    for name, arr in tensors:
        a = np.ascontiguousarray(arr, dtype='<f4')
        dims = list(reversed(a.shape))
        out += gguf_str(name) + struct.pack('<I', len(dims))
        for d in dims: out += struct.pack('<Q', d)
        out += struct.pack('<IQ', 0, off)
        b = a.tobytes()
        b += b'\0' * ((32 - len(b) % 32) % 32)
        datas.append(b)
        off += len(b)
    out += b'\0' * ((32 - len(out) % 32) % 32)
    for b in datas: out += b
    with open(path, 'wb') as f: f.write(out)

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
    """[..., nh*Dh] or [..., nh, Dh] half-split channels -> adjacent pairs."""
    shp = x.shape
    y = x.reshape(*shp[:-1], -1, 2, Dh // 2) if shp[-1] == Dh else x.reshape(*shp[:-1], -1, 2, Dh // 2)
    y = y.transpose(-1, -2).reshape(shp)
    return y

def permute_rows_gguf(w, n_head, Dh):
    """llama.cpp convert_hf_to_gguf permute (used for *llama* only)."""
    return w.reshape(n_head, 2, Dh // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

# ---------------- Qwen2 ----------------

def qwen2(out):
    D, L, H, K, Dh, M, V, ctx, theta, eps = 32, 2, 4, 2, 8, 48, 64, 32, 1e6, 1e-6
    rng = np.random.default_rng(7)
    def w(*s): return (rng.standard_normal(s) * 0.2).astype(np.float32)
    def nw(*s): return (1.0 + rng.standard_normal(s) * 0.1).astype(np.float32)
    P = {'model.embed_tokens.weight': w(V, D), 'model.norm.weight': nw(D), 'lm_head.weight': w(V, D)}
    for l in range(L):
        p = f'model.layers.{l}.'
        P[p + 'input_layernorm.weight'] = nw(D)
        P[p + 'self_attn.q_proj.weight'] = w(H * Dh, D); P[p + 'self_attn.q_proj.bias'] = w(H * Dh)
        P[p + 'self_attn.k_proj.weight'] = w(K * Dh, D); P[p + 'self_attn.k_proj.bias'] = w(K * Dh)
        P[p + 'self_attn.v_proj.weight'] = w(K * Dh, D); P[p + 'self_attn.v_proj.bias'] = w(K * Dh)
        P[p + 'self_attn.o_proj.weight'] = w(D, H * Dh)
        P[p + 'post_attention_layernorm.weight'] = nw(D)
        P[p + 'mlp.gate_proj.weight'] = w(M, D); P[p + 'mlp.up_proj.weight'] = w(M, D)
        P[p + 'mlp.down_proj.weight'] = w(D, M)
    d = os.path.join(out, 'arch_qwen2'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['Qwen2ForCausalLM'], model_type='qwen2', hidden_size=D, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=K, intermediate_size=M, vocab_size=V,
               max_position_embeddings=ctx, rms_norm_eps=eps, rope_theta=theta, hidden_act='silu',
               tie_word_embeddings=False, torch_dtype='float32')
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    # GGUF as llama.cpp's converter writes qwen2: no q/k permutation (NeoX RoPE)
    kv = [('general.architecture', 'str', 'qwen2'), ('qwen2.context_length', 'u32', ctx),
          ('qwen2.embedding_length', 'u32', D), ('qwen2.block_count', 'u32', L),
          ('qwen2.feed_forward_length', 'u32', M), ('qwen2.attention.head_count', 'u32', H),
          ('qwen2.attention.head_count_kv', 'u32', K), ('qwen2.rope.freq_base', 'f32', theta),
          ('qwen2.attention.layer_norm_rms_epsilon', 'f32', eps)]
    T = [('token_embd.weight', P['model.embed_tokens.weight']), ('output_norm.weight', P['model.norm.weight']),
         ('output.weight', P['lm_head.weight'])]
    names = {'input_layernorm.weight': 'attn_norm.weight', 'self_attn.q_proj.weight': 'attn_q.weight',
             'self_attn.q_proj.bias': 'attn_q.bias', 'self_attn.k_proj.weight': 'attn_k.weight',
             'self_attn.k_proj.bias': 'attn_k.bias', 'self_attn.v_proj.weight': 'attn_v.weight',
             'self_attn.v_proj.bias': 'attn_v.bias', 'self_attn.o_proj.weight': 'attn_output.weight',
             'post_attention_layernorm.weight': 'ffn_norm.weight', 'mlp.gate_proj.weight': 'ffn_gate.weight',
             'mlp.up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight'}
    for l in range(L):
        for hf, gg in names.items(): T.append((f'blk.{l}.{gg}', P[f'model.layers.{l}.{hf}']))
    write_gguf(os.path.join(out, 'arch_qwen2.gguf'), kv, T)

    # reference forward (HF Qwen2 math)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    toks = [3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33]
    n = len(toks)
    acts = {}
    def rms(x, wt): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * wt
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
        q = (h @ t[p + 'self_attn.q_proj.weight'].T + t[p + 'self_attn.q_proj.bias']).view(1, n, H, Dh)
        k = (h @ t[p + 'self_attn.k_proj.weight'].T + t[p + 'self_attn.k_proj.bias']).view(1, n, K, Dh)
        v = (h @ t[p + 'self_attn.v_proj.weight'].T + t[p + 'self_attn.v_proj.bias']).view(1, n, K, Dh)
        acts[b + 'attn.hook_q'] = to_adjacent(q, Dh); acts[b + 'attn.hook_k'] = to_adjacent(k, Dh)
        acts[b + 'attn.hook_v'] = v
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
    logits = h @ t['lm_head.weight'].T
    write_golden(os.path.join(out, 'arch_qwen2.h5'), toks, logits, acts)

# ---------------- GPT-2 ----------------

def gpt2(out):
    D, L, H, M, V, ctx, eps = 32, 2, 4, 64, 64, 16, 1e-5
    Dh = D // H
    rng = np.random.default_rng(11)
    def w(*s): return (rng.standard_normal(s) * 0.2).astype(np.float32)
    def nw(*s): return (1.0 + rng.standard_normal(s) * 0.1).astype(np.float32)
    P = {'wte.weight': w(V, D), 'wpe.weight': w(ctx, D), 'ln_f.weight': nw(D), 'ln_f.bias': w(D)}
    for l in range(L):
        p = f'h.{l}.'
        P[p + 'ln_1.weight'] = nw(D); P[p + 'ln_1.bias'] = w(D)
        P[p + 'attn.c_attn.weight'] = w(D, 3 * D); P[p + 'attn.c_attn.bias'] = w(3 * D)   # Conv1D [in, out]
        P[p + 'attn.c_proj.weight'] = w(D, D); P[p + 'attn.c_proj.bias'] = w(D)
        P[p + 'ln_2.weight'] = nw(D); P[p + 'ln_2.bias'] = w(D)
        P[p + 'mlp.c_fc.weight'] = w(D, M); P[p + 'mlp.c_fc.bias'] = w(M)
        P[p + 'mlp.c_proj.weight'] = w(M, D); P[p + 'mlp.c_proj.bias'] = w(D)
    d = os.path.join(out, 'arch_gpt2'); os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=['GPT2LMHeadModel'], model_type='gpt2', n_embd=D, n_layer=L, n_head=H, n_inner=M,
               n_positions=ctx, n_ctx=ctx, vocab_size=V, layer_norm_epsilon=eps, activation_function='gelu_new')
    with open(os.path.join(d, 'config.json'), 'w') as f: json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, 'model.safetensors'), P)
    # GGUF as llama.cpp's converter writes gpt2: Conv1D weights transposed to [out, in]
    kv = [('general.architecture', 'str', 'gpt2'), ('gpt2.context_length', 'u32', ctx),
          ('gpt2.embedding_length', 'u32', D), ('gpt2.block_count', 'u32', L),
          ('gpt2.feed_forward_length', 'u32', M), ('gpt2.attention.head_count', 'u32', H),
          ('gpt2.attention.layer_norm_epsilon', 'f32', eps)]
    T = [('token_embd.weight', P['wte.weight']), ('position_embd.weight', P['wpe.weight']),
         ('output_norm.weight', P['ln_f.weight']), ('output_norm.bias', P['ln_f.bias'])]
    for l in range(L):
        p = f'h.{l}.'
        T += [(f'blk.{l}.attn_norm.weight', P[p + 'ln_1.weight']), (f'blk.{l}.attn_norm.bias', P[p + 'ln_1.bias']),
              (f'blk.{l}.attn_qkv.weight', P[p + 'attn.c_attn.weight'].T), (f'blk.{l}.attn_qkv.bias', P[p + 'attn.c_attn.bias']),
              (f'blk.{l}.attn_output.weight', P[p + 'attn.c_proj.weight'].T), (f'blk.{l}.attn_output.bias', P[p + 'attn.c_proj.bias']),
              (f'blk.{l}.ffn_norm.weight', P[p + 'ln_2.weight']), (f'blk.{l}.ffn_norm.bias', P[p + 'ln_2.bias']),
              (f'blk.{l}.ffn_up.weight', P[p + 'mlp.c_fc.weight'].T), (f'blk.{l}.ffn_up.bias', P[p + 'mlp.c_fc.bias']),
              (f'blk.{l}.ffn_down.weight', P[p + 'mlp.c_proj.weight'].T), (f'blk.{l}.ffn_down.bias', P[p + 'mlp.c_proj.bias'])]
    write_gguf(os.path.join(out, 'arch_gpt2.gguf'), kv, T)

    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    toks = [1, 60, 2, 2, 33, 47, 9, 0, 14, 14, 25, 38]
    n = len(toks)
    acts = {}
    def ln(x, wt, bs): return torch.nn.functional.layer_norm(x, (D,), wt, bs, eps)
    def gelu_new(x): return 0.5 * x * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    x = (t['wte.weight'][toks] + t['wpe.weight'][:n]).unsqueeze(0)
    acts['hook_embed'] = x
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(L):
        p = f'h.{l}.'
        b = f'blocks.{l}.'
        acts[b + 'hook_resid_pre'] = x
        h = ln(x, t[p + 'ln_1.weight'], t[p + 'ln_1.bias']); acts[b + 'ln1.hook_normalized'] = h
        qkv = h @ t[p + 'attn.c_attn.weight'] + t[p + 'attn.c_attn.bias']
        q, k, v = [y.view(1, n, H, Dh) for y in qkv.split(D, -1)]
        acts[b + 'attn.hook_q'] = q; acts[b + 'attn.hook_k'] = k; acts[b + 'attn.hook_v'] = v
        acts[b + 'attn.hook_rot_q'] = q; acts[b + 'attn.hook_rot_k'] = k
        sc = torch.einsum('bthd,bshd->bhts', q, k) / Dh ** 0.5
        sc = sc.masked_fill(mask, float('-inf')); acts[b + 'attn.hook_attn_scores'] = sc
        pat = torch.softmax(sc, -1); acts[b + 'attn.hook_pattern'] = pat
        z = torch.einsum('bhts,bshd->bthd', pat, v); acts[b + 'attn.hook_z'] = z
        ao = z.reshape(1, n, D) @ t[p + 'attn.c_proj.weight'] + t[p + 'attn.c_proj.bias']; acts[b + 'hook_attn_out'] = ao
        x = x + ao; acts[b + 'hook_resid_mid'] = x
        h = ln(x, t[p + 'ln_2.weight'], t[p + 'ln_2.bias']); acts[b + 'ln2.hook_normalized'] = h
        pre = h @ t[p + 'mlp.c_fc.weight'] + t[p + 'mlp.c_fc.bias']; acts[b + 'mlp.hook_pre'] = pre
        a = gelu_new(pre); acts[b + 'mlp.hook_post'] = a
        mo = a @ t[p + 'mlp.c_proj.weight'] + t[p + 'mlp.c_proj.bias']; acts[b + 'hook_mlp_out'] = mo
        x = x + mo; acts[b + 'hook_resid_post'] = x
    h = ln(x, t['ln_f.weight'], t['ln_f.bias']); acts['ln_final.hook_normalized'] = h
    logits = h @ t['wte.weight'].T
    write_golden(os.path.join(out, 'arch_gpt2.h5'), toks, logits, acts)

if __name__ == '__main__':
    out = sys.argv[1] if len(sys.argv) > 1 else 'tests/data'
    qwen2(out)
    gpt2(out)
