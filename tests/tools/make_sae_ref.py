#!/usr/bin/python3
"""make_sae_ref.py — writes the SAE reference data under tests/data/sae/:
small SAELens folders (cfg.json + sae_weights.safetensors, d_in 16, d_sae 48)
in the forms SAELens writes, and for each the expected encode / decode /
forward outputs on fixed inputs, computed in float64 by the numpy
implementation below, written from SAELens's published definitions
(sae_lens/saes/sae.py, standard_sae.py, topk_sae.py, jumprelu_sae.py and the
pre-6.0 finetuning scaling factor), independently of mechprobe's C code.

Needs /usr/bin/python3 with numpy only (no torch, no safetensors package: the
writer here is a few lines of the published format).

    /usr/bin/python3 tests/tools/make_sae_ref.py [OUTDIR]     # default tests/data/sae

Cases:
  standard_cnr   v6 cfg ("metadata"), standard, normalize constant_norm_rescale
  topk_k5        v6 cfg (early v6 "meta"), topk k=5, apply_b_dec_to_input false
  jumprelu_ln    v6 cfg, jumprelu (threshold), normalize layer_norm
  legacy_topk    v5 flat cfg: activation_fn_str "topk" + activation_fn_kwargs.k,
                 finetuning_scaling_factor true + a scaling_factor tensor, F16
  standard_bf16  v6 cfg, standard, weights in BF16
Each <case>.ref.safetensors holds (F32): x [N, d_in], feature_acts
[N, d_sae] (encode), sae_out [N, d_in] (forward = decode(encode(x)) with the
run-time normalisation undone), decode_raw [N, d_in] (decode of feature_acts
without any normalisation state: acts @ W_dec + b_dec). ref.lua holds the
first two rows of each for the Lua test; fuzz_seed.bin is topk_k5 as one
buffer for tests/fuzz_sae_io.c.
"""
import json
import os
import struct
import sys

import numpy as np

D_IN, D_SAE, N = 16, 48, 8


# ---- safetensors (https://github.com/huggingface/safetensors: 8-byte LE header
# length, JSON header, data; offsets relative to the data section) ----

def bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_value(a):
    return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        if dtype == "F32":
            raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        elif dtype == "F16":
            raw = np.ascontiguousarray(arr, dtype="<f2").tobytes()
        elif dtype == "BF16":
            raw = bf16_bits(arr).astype("<u2").tobytes()
        else:
            raise ValueError(dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def stored(arr, dtype):
    """The float64 values a tensor has once written as dtype."""
    if dtype == "F32":
        return arr.astype(np.float32).astype(np.float64)
    if dtype == "F16":
        return arr.astype(np.float16).astype(np.float64)
    return bf16_value(arr)


# ---- SAELens's inference SAE, float64 ----

def norm_in(x, mode):
    """(x normalised, a function undoing it on a reconstruction)."""
    if mode == "constant_norm_rescale":
        coeff = np.sqrt(x.shape[-1]) / np.linalg.norm(x, axis=-1, keepdims=True)
        return x * coeff, lambda r: r / coeff
    if mode == "layer_norm":
        mu = x.mean(axis=-1, keepdims=True)
        xc = x - mu
        std = xc.std(axis=-1, ddof=1, keepdims=True)          # torch.std: unbiased
        return xc / (std + 1e-5), lambda r: r * std + mu
    return x, lambda r: r                                    # none, expected_average_only_in


def encode(w, cfg, x):
    xn, undo = norm_in(x, cfg["norm"])
    pre = (xn - w["b_dec"] * (1.0 if cfg["apply"] else 0.0)) @ w["W_enc"] + w["b_enc"]
    arch = cfg["arch"]
    if arch == "standard":
        acts = np.maximum(pre, 0.0)
    elif arch == "jumprelu":
        acts = np.maximum(pre, 0.0) * (pre > w["threshold"])
    elif arch == "topk":
        acts = np.zeros_like(pre)
        idx = np.argsort(-pre, axis=-1, kind="stable")[:, :cfg["k"]]
        for r in range(pre.shape[0]):
            acts[r, idx[r]] = np.maximum(pre[r, idx[r]], 0.0)
    else:
        raise ValueError(arch)
    return pre, acts, undo


def decode_raw(w, acts):
    sf = w.get("scaling_factor")
    a = acts * sf if sf is not None else acts                # pre-6.0 apply_finetuning_scaling_factor
    return a @ w["W_dec"] + w["b_dec"]


# ---- the cases ----

def margins_ok(pre, cfg, w):
    """Reject draws whose float32 rounding could flip a selection."""
    if np.min(np.abs(pre)) < 1e-3:
        return False
    if cfg["arch"] == "jumprelu" and np.min(np.abs(pre - w["threshold"])) < 1e-3:
        return False
    if cfg["arch"] == "topk":
        s = -np.sort(-pre, axis=-1)
        if np.min(s[:, cfg["k"] - 1] - s[:, cfg["k"]]) < 1e-3:
            return False
    return True


def make_case(name, cfg, cfg_json, dtype, seed, outdir):
    for attempt in range(1000):
        rng = np.random.default_rng(seed * 1000 + attempt)
        w = {
            "W_enc": rng.normal(0, 0.35, (D_IN, D_SAE)),
            "b_enc": rng.normal(-0.2, 0.3, D_SAE),
            "W_dec": rng.normal(0, 0.25, (D_SAE, D_IN)),
            "b_dec": rng.normal(0, 0.5, D_IN),
        }
        if cfg["arch"] == "jumprelu":
            w["threshold"] = rng.uniform(0.05, 0.6, D_SAE)
        if cfg.get("scaling_factor"):
            w["scaling_factor"] = rng.uniform(0.5, 1.5, D_SAE)
        x = rng.normal(0.3, 1.5, (N, D_IN)).astype(np.float32).astype(np.float64)
        w = {k: stored(v, dtype) for k, v in w.items()}
        pre, acts, undo = encode(w, cfg, x)
        if margins_ok(pre, cfg, w) and np.count_nonzero(acts) > N:
            break
    else:
        raise SystemExit(f"{name}: no draw with safe margins")
    raw = decode_raw(w, acts)
    out = undo(raw)
    folder = os.path.join(outdir, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(cfg_json, f, indent=1)
        f.write("\n")
    order = ["W_enc", "b_enc", "W_dec", "b_dec", "threshold", "scaling_factor"]
    write_safetensors(os.path.join(folder, "sae_weights.safetensors"), [(k, w[k]) for k in order if k in w], dtype)
    ref = [("x", x), ("feature_acts", acts), ("sae_out", out), ("decode_raw", raw)]
    write_safetensors(os.path.join(outdir, name + ".ref.safetensors"), ref, "F32")
    return ref


def lua_rows(a):
    return "{" + ", ".join("{" + ", ".join("%.17g" % v for v in row) + "}" for row in a[:2]) + "}"


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "sae")
    os.makedirs(outdir, exist_ok=True)
    v6 = "6.5.0"
    cases = [
        ("standard_cnr", {"arch": "standard", "norm": "constant_norm_rescale", "apply": True}, {
            "architecture": "standard", "d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": True, "normalize_activations": "constant_norm_rescale",
            "reshape_activations": "none",
            "metadata": {"sae_lens_version": v6, "sae_lens_training_version": v6, "model_name": "tiny-ref",
                         "hook_name": "blocks.1.hook_resid_pre", "prepend_bos": True, "context_size": 128}},
         "F32", 1),
        ("topk_k5", {"arch": "topk", "k": 5, "norm": "none", "apply": False}, {
            "architecture": "topk", "d_in": D_IN, "d_sae": D_SAE, "k": 5, "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
            "meta": {"sae_lens_version": "6.0.0", "model_name": "tiny-ref", "hook_name": "blocks.0.hook_mlp_out",
                     "hook_layer": 0}},
         "F32", 2),
        ("jumprelu_ln", {"arch": "jumprelu", "norm": "layer_norm", "apply": True}, {
            "architecture": "jumprelu", "d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": True, "normalize_activations": "layer_norm", "reshape_activations": "none",
            "metadata": {"sae_lens_version": v6, "model_name": "tiny-ref", "hook_name": "blocks.2.hook_resid_post"}},
         "F32", 3),
        ("legacy_topk", {"arch": "topk", "k": 6, "norm": "none", "apply": True, "scaling_factor": True}, {
            "model_name": "tiny-ref", "hook_point": "blocks.1.hook_resid_mid", "hook_point_layer": 1,
            "hook_point_head_index": None, "d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", "device": "cpu",
            "activation_fn_str": "topk", "activation_fn_kwargs": {"k": 6}, "apply_b_dec_to_input": True,
            "finetuning_scaling_factor": True, "normalize_activations": False, "context_size": 128,
            "prepend_bos": True, "sae_lens_training_version": "3.13.0"},
         "F16", 4),
        ("standard_bf16", {"arch": "standard", "norm": "none", "apply": True}, {
            "architecture": "standard", "d_in": D_IN, "d_sae": D_SAE, "dtype": "bfloat16", "device": "cpu",
            "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
            "metadata": {"sae_lens_version": v6, "model_name": "tiny-ref", "hook_name": "blocks.0.hook_resid_post",
                         "hook_layer": 0}},
         "BF16", 5),
    ]
    lua = ["-- ref.lua (written by tests/tools/make_sae_ref.py): the first two rows of each case", "return {"]
    for name, cfg, cfg_json, dtype, seed in cases:
        ref = make_case(name, cfg, cfg_json, dtype, seed, outdir)
        lua.append("  %s = {" % name)
        for k, a in ref:
            lua.append("    %s = %s," % (k, lua_rows(a)))
        lua.append("  },")
    lua.append("}")
    # the fuzz seed (tests/fuzz_sae_io.c): u32 length, cfg.json, the safetensors file of topk_k5
    with open(os.path.join(outdir, "topk_k5", "cfg.json"), "rb") as f:
        cfg = f.read()
    with open(os.path.join(outdir, "topk_k5", "sae_weights.safetensors"), "rb") as f:
        weights = f.read()
    with open(os.path.join(outdir, "fuzz_seed.bin"), "wb") as f:
        f.write(struct.pack("<I", len(cfg)) + cfg + weights)
    with open(os.path.join(outdir, "ref.lua"), "w") as f:
        f.write("\n".join(lua) + "\n")


if __name__ == "__main__":
    main()
