"""test_sae_io.py — mechprobe.SAE (python/mpy_sae.c): SAE.load of each golden
SAELens folder in tests/data/sae (written by tests/tools/make_sae_ref.py from
SAELens's definitions in float64 numpy) and its encode / forward / decode
against the reference to 1e-5 (|got - want| <= 1e-5 (|want| + max|want|));
the same numbers bit for bit as the Lua binding (mp.sae.load) on the same
input; SAE(...) with weights set through the numpy views against a closed
form; views valid after close / del; save -> load bit-identical; errors."""
import gc
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import mechprobe

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "sae")
CASES = {
    "standard_cnr": ("standard", "constant_norm_rescale", None, True, "blocks.1.hook_resid_pre", 1),
    "topk_k5": ("topk", "none", 5, False, "blocks.0.hook_mlp_out", 0),
    "jumprelu_ln": ("jumprelu", "layer_norm", None, True, "blocks.2.hook_resid_post", 2),
    "legacy_topk": ("topk", "none", 6, True, "blocks.1.hook_resid_mid", 1),
    "standard_bf16": ("standard", "none", None, True, "blocks.0.hook_resid_post", 0),
}


def read_safetensors(path):
    """F32 tensors of a safetensors file (the published layout)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32"
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out


def rel_err(got, want):
    mx = np.max(np.abs(want))
    return float(np.max(np.abs(got.astype(np.float64) - want) / (np.abs(want) + mx)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name, tmp_path):
    arch, norm, k, apply, hook, layer = CASES[name]
    ref = read_safetensors(os.path.join(DATA, name + ".ref.safetensors"))
    sae = mechprobe.SAE.load(os.path.join(DATA, name))
    cfg = sae.cfg
    assert (cfg["architecture"], cfg["normalize_activations"], cfg.get("k"), cfg["apply_b_dec_to_input"]) == \
        (arch, norm, k, apply)
    assert (cfg["d_in"], cfg["d_sae"], cfg["hook_name"], cfg["hook_layer"], cfg["model_name"]) == \
        (16, 48, hook, layer, "tiny-ref")
    x = ref["x"]
    acts = sae.encode(x)
    assert acts.dtype == np.float32 and acts.shape == (8, 48)
    assert rel_err(acts, ref["feature_acts"]) <= 1e-5
    assert np.array_equal(acts != 0, ref["feature_acts"] != 0)
    out = sae.forward(x)
    assert rel_err(out, ref["sae_out"]) <= 1e-5
    out2, acts2 = sae.forward(x, return_feature_acts=True)
    assert np.array_equal(out2, out) and np.array_equal(acts2, acts)
    assert np.array_equal(sae(x), out)
    assert rel_err(sae.decode(ref["feature_acts"]), ref["decode_raw"]) <= 1e-5
    # decode with x undoes x's normalisation: forward == decode(encode(x), x)
    assert np.array_equal(sae.decode(acts, x), out)
    # leading dimensions are kept: [2, 4, d_in]
    assert np.array_equal(sae.encode(x.reshape(2, 4, 16)), acts.reshape(2, 4, 48))
    # save -> load: bit-identical weights, the same cfg
    d = str(tmp_path / "saved")
    sae.save(d)
    back = mechprobe.SAE.load(d)
    assert back.cfg == cfg
    for w in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold"):
        a, b = getattr(sae, w), getattr(back, w)
        assert (a is None) == (b is None) == (w == "threshold" and arch != "jumprelu")
        if a is not None:
            assert a.tobytes() == b.tobytes()
    with open(os.path.join(d, "cfg.json")) as f:
        saved = json.load(f)
    assert saved["architecture"] == arch and saved["metadata"]["sae_lens_version"] == "6.0.0"
    assert saved["metadata"]["hook_name"] == hook and saved.get("k") == k


def test_same_as_lua(tmp_path):
    """The Python and Lua bindings call the same C functions: identical floats."""
    cli = os.environ.get("MP_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("MP_CLI (the mechprobe binary) not set")
    script = tmp_path / "sae.lua"
    script.write_text(
        'local ref = dofile(arg[1] .. "/ref.lua")\n'
        'for _, name in ipairs({"standard_cnr", "topk_k5", "jumprelu_ln", "legacy_topk", "standard_bf16"}) do\n'
        '  local sae = mp.sae.load(arg[1] .. "/" .. name)\n'
        '  local out, acts = sae:forward(mp.tensor(ref[name].x))\n'
        '  for _, t in ipairs({out, acts}) do\n'
        '    for _, v in ipairs(t:reshape(-1):totable()) do io.write(string.format("%.9g\\n", v)) end\n'
        '  end\n'
        'end\n')
    res = subprocess.run([cli, str(script), DATA], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lua_vals = np.array([float(v) for v in res.stdout.split()], dtype=np.float32)
    py_vals = []
    for name in ["standard_cnr", "topk_k5", "jumprelu_ln", "legacy_topk", "standard_bf16"]:
        x = read_safetensors(os.path.join(DATA, name + ".ref.safetensors"))["x"][:2]
        out, acts = mechprobe.SAE.load(os.path.join(DATA, name)).forward(x, return_feature_acts=True)
        py_vals += [out.ravel(), acts.ravel()]
    py_vals = np.concatenate(py_vals)
    assert lua_vals.shape == py_vals.shape
    assert np.array_equal(lua_vals, py_vals)


def test_new_and_views():
    """SAE(...) starts at zero; weights written through the views drive encode / decode (closed form)."""
    sae = mechprobe.SAE(architecture="topk", d_in=4, d_sae=6, k=2, hook_name="blocks.0.hook_resid_pre",
                        hook_layer=0)
    assert sae.cfg == {"architecture": "topk", "d_in": 4, "d_sae": 6, "k": 2, "apply_b_dec_to_input": True,
                       "normalize_activations": "none", "reshape_activations": "none",
                       "hook_name": "blocks.0.hook_resid_pre", "hook_layer": 0}
    assert sae.W_enc.shape == (4, 6) and sae.W_dec.shape == (6, 4) and sae.threshold is None
    assert not sae.W_enc.any()
    rng = np.random.default_rng(0)
    We, be = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=6).astype(np.float32)
    Wd, bd = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    sae.W_enc[...] = We
    sae.b_enc[:] = be
    sae.W_dec[...] = Wd
    sae.b_dec[:] = bd
    x = rng.normal(size=(5, 4)).astype(np.float32)
    pre = (x.astype(np.float64) - bd) @ We + be
    want = np.zeros_like(pre)
    for r in range(5):
        top = np.argsort(-pre[r])[:2]
        want[r, top] = np.maximum(pre[r, top], 0)
    acts = sae.encode(x)
    assert np.allclose(acts, want, rtol=1e-5, atol=1e-5)
    assert np.allclose(sae.decode(acts), acts.astype(np.float64) @ Wd + bd, rtol=1e-5, atol=1e-5)
    j = mechprobe.SAE(architecture="jumprelu", d_in=3, d_sae=5, normalize_activations="layer_norm")
    assert j.threshold.shape == (5,) and j.cfg["normalize_activations"] == "layer_norm"


def test_views_outlive_the_sae():
    sae = mechprobe.SAE(d_in=3, d_sae=4)
    w = sae.W_dec
    w[...] = 2.5
    sae.close()
    assert sae.closed and repr(sae) == "mechprobe.SAE (closed)"
    assert float(w.sum()) == 2.5 * 12          # still readable (the block outlives the SAE)
    with pytest.raises(ValueError, match="closed"):
        sae.encode(np.zeros((1, 3), np.float32))
    sae2 = mechprobe.SAE(d_in=3, d_sae=4)
    b = sae2.b_dec
    del sae2
    gc.collect()
    b[:] = 1.0
    assert float(b.sum()) == 3.0
    sae2 = mechprobe.SAE(d_in=3, d_sae=4)
    sae2.close()
    sae2.close()                               # idempotent
    with mechprobe.SAE(d_in=2, d_sae=2) as s:
        assert s.encode([[1.0, 2.0]]).shape == (1, 2)
    assert s.closed


def test_errors(tmp_path):
    with pytest.raises(OSError, match="nowhere"):
        mechprobe.SAE.load(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="cfg.json"):
        mechprobe.SAE.load(str(tmp_path / "empty"))
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = json.load(open(os.path.join(DATA, "topk_k5", "cfg.json")))
    cfg["architecture"] = "gated"
    (bad / "cfg.json").write_text(json.dumps(cfg))
    (bad / "sae_weights.safetensors").write_bytes(open(os.path.join(DATA, "topk_k5", "sae_weights.safetensors"),
                                                        "rb").read())
    with pytest.raises(mechprobe.Error, match=r"bad/cfg.json: architecture \"gated\""):
        mechprobe.SAE.load(str(bad))
    sae = mechprobe.SAE.load(os.path.join(DATA, "topk_k5"))
    with pytest.raises(ValueError, match="last dimension must be 16"):
        sae.encode(np.zeros((2, 15), np.float32))
    with pytest.raises(ValueError, match="got a scalar"):
        sae.encode(1.0)
    with pytest.raises(ValueError, match="last dimension must be 48"):
        sae.decode(np.zeros((2, 16), np.float32))
    with pytest.raises(OSError, match="not an SAE folder"):
        sae.save(str(bad / "cfg.json"))
    with pytest.raises(OSError, match="holds"):
        sae.save(str(bad.parent))             # a folder with other things in it is never replaced
    with pytest.raises(ValueError, match="needs k"):
        mechprobe.SAE(architecture="topk", d_in=4, d_sae=8)
    with pytest.raises(ValueError, match="unknown architecture"):
        mechprobe.SAE(architecture="gated", d_in=4, d_sae=8)
    with pytest.raises(ValueError, match="d_in and d_sae"):
        mechprobe.SAE(architecture="standard")
    with pytest.raises(TypeError):
        mechprobe.SAE("standard", 4, 8)        # keywords only
