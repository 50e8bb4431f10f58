"""Weights in TransformerLens's shapes, named parameters, weight processing and
their lifetime: each against the Lua binding on the same model (bit for bit),
against the nn.Linear layout by hand, and the misuse errors."""
import gc

import numpy as np
import pytest

import mechprobe
from extra_util import MODEL, SMALL, TOK, h5read, lua, need_model, same, small_checkpoint

TL_NAMES = ["W_E", "W_pos", "W_U", "W_Q", "W_K", "W_V", "_W_K", "_W_V", "W_O", "W_in", "W_out", "b_Q", "b_K", "b_V",
            "_b_K", "_b_V", "b_O", "b_in", "b_out"]

LUA_DUMP = """
local m = mp.load(arg[1])
local f = mp.h5.open(arg[2], "w")
for _, k in ipairs{"W_E", "W_pos", "W_U"} do
  local ok, t = pcall(function() return m[k] end)
  if ok and t then f:write(k, t) end
end
for _, k in ipairs{%s} do
  if pcall(m[k], m) then
    f:write(k, m[k](m))
    for l = 0, m.config.n_layer - 1 do f:write(k .. "_l" .. l, m[k](m, l)) end
  end
end
local names = m:params()
print(table.concat(names, ","))
if arg[3] == "params" then for _, n in ipairs(names) do f:write("param." .. n, m:param(n)) end end
f:close()
"""


def lua_dump(tmp_path, path, params=False):
    names = ",".join(f'"{n}"' for n in TL_NAMES if n not in ("W_E", "W_pos", "W_U"))
    out = tmp_path / "lua_w.h5"
    names_line = lua(tmp_path, LUA_DUMP % names, path, out, "params" if params else "no").strip().splitlines()[-1]
    return h5read(out), names_line.split(",")


def test_tl_weights_equal_lua_llama2c(tmp_path):
    need_model()
    ref, names = lua_dump(tmp_path, MODEL)
    m = mechprobe.load(MODEL, TOK)
    assert m.params() == names
    seen = 0
    for k in TL_NAMES:
        if k not in ref and not any(r.startswith(k + "_l") for r in ref):
            with pytest.raises(AttributeError, match=k):
                getattr(m, k)
            continue
        same(getattr(m, k), ref[k])
        seen += 1
        if k.startswith(("W_E", "W_pos", "W_U")):
            continue
        for l in range(m.config["n_layer"]):
            same(m.weight(k, l), ref[f"{k}_l{l}"])
            same(getattr(m, k)[l], ref[f"{k}_l{l}"])
    assert seen >= 8  # W_E, W_U, W_Q, W_K, W_V, _W_K, _W_V, W_O, W_in, W_out ...


def test_tl_weights_and_params_equal_lua_checkpoint(tmp_path):
    ck = small_checkpoint(tmp_path)
    ref, names = lua_dump(tmp_path, ck, params=True)
    m = mechprobe.load(ck)
    assert m.params() == names
    for k in TL_NAMES:
        same(getattr(m, k), ref[k])
    sd = m.state_dict()
    assert list(sd) == names
    for n in names:
        same(sd[n], ref["param." + n])
        same(m.param(n), ref["param." + n])


def test_tl_layout_by_hand():
    """W_Q[l, h] = wq[h*Dh:(h+1)*Dh, :].T; W_O[l, h] = wo[:, h*Dh:(h+1)*Dh].T;
    W_U = embed.T (tied); GQA: W_K[h] = _W_K[h // (H/K)]."""
    m = mechprobe.Model(SMALL, seed=3)
    H, K, Dh = SMALL["n_head"], SMALL["n_kv_head"], SMALL["d_model"] // SMALL["n_head"]
    for l in range(SMALL["n_layer"]):
        wq, wo, wk = m.param(f"blocks.{l}.attn.wq"), m.param(f"blocks.{l}.attn.wo"), m.param(f"blocks.{l}.attn.wk")
        for h in range(H):
            same(m.W_Q[l, h], wq[h * Dh:(h + 1) * Dh].T)
            same(m.W_O[l, h], wo[:, h * Dh:(h + 1) * Dh].T)
            same(m.W_K[l, h], wk[(h // (H // K)) * Dh:(h // (H // K) + 1) * Dh].T)
        same(m.W_in[l], m.param(f"blocks.{l}.mlp.w1").T)
    same(m.W_U, m.param("unembed").T)
    need_model()
    t = mechprobe.load(MODEL)
    same(t.W_U, t.param("embed").T)  # tied, memory-mapped: reading works


def test_set_weight_and_set_param_round_trip(tmp_path):
    m = mechprobe.Model(SMALL, seed=4)
    rng = np.random.default_rng(0)
    new = rng.standard_normal(m.W_Q[1].shape).astype(np.float32)
    m.set_weight("W_Q", new, layer=1)
    same(m.W_Q[1], new)
    v = rng.standard_normal(m.param("blocks.0.mlp.w2").shape).astype(np.float32)
    m.set_param("blocks.0.mlp.w2", v)
    same(m.param("blocks.0.mlp.w2"), v)
    same(m.W_out[0], v.T)
    p = tmp_path / "w.h5"
    m.save(str(p))
    out = tmp_path / "lua_w.h5"
    lua(tmp_path, 'local m = mp.load(arg[1]); local f = mp.h5.open(arg[2], "w"); f:write("q", m:W_Q(1)); '
                  'f:write("w2", m:param("blocks.0.mlp.w2")); f:close()', p, out)
    ref = h5read(out)
    same(ref["q"], new)
    same(ref["w2"], v)


def test_weight_errors():
    need_model()
    m = mechprobe.load(MODEL, TOK)
    with pytest.raises(KeyError, match="no parameter \"nope\""):
        m.param("nope")
    with pytest.raises(ValueError, match="read-only.*aidreams260K.bin"):
        m.set_param("embed", m.param("embed"))
    with pytest.raises(ValueError, match="set_weight: W_Q is read-only.*aidreams260K.bin"):
        m.set_weight("W_Q", m.W_Q)
    with pytest.raises(ValueError, match="layer must be an integer in 0..3"):
        m.weight("W_Q", 9)
    with pytest.raises(ValueError, match="unknown weight"):
        m.weight("W_nope")
    with pytest.raises(AttributeError, match="b_U"):
        m.b_U
    s = mechprobe.Model(SMALL, seed=1)
    with pytest.raises(ValueError, match="W_Q \\(all layers\\) must be \\[2, 4, 32, 8\\].*got \\[2, 2\\]"):
        s.set_weight("W_Q", np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="_W_K"):  # repeated over query heads under GQA
        s.set_weight("W_K", s.W_K)
    with pytest.raises(ValueError, match="has shape \\[32, 32\\]"):
        s.set_param("blocks.0.attn.wq", np.zeros((3, 3)))
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.W_Q


def test_arrays_outlive_the_model():
    """Copies: arrays read before close() / del stay valid (ASan would see a
    use after free)."""
    need_model()
    m = mechprobe.load(MODEL, TOK)
    wq, we, sd, emb = m.W_Q, m.W_E, m.state_dict(), m.param("embed")
    ref = float(wq.sum()), float(we.sum())
    m.close()
    m2 = mechprobe.load(MODEL, TOK)
    wq2 = m2.W_Q
    del m2, m
    gc.collect()
    assert (float(wq.sum()), float(we.sum())) == ref
    same(wq, wq2)
    same(sd["embed"], emb)
    assert wq.flags.owndata and emb.flags.owndata


LUA_PROCESS = """
local m = mp.load(arg[1])
local r = m:process_weights(%s)
local a = {}
for _, k in ipairs(r.applied) do a[#a + 1] = k end
local s = {}
for k, v in pairs(r.skipped) do s[#s + 1] = k end
table.sort(s)
print(table.concat(a, ",") .. "|" .. table.concat(s, ","))
local f = mp.h5.open(arg[2], "w")
for _, n in ipairs(m:params()) do f:write(n, m:param(n)) end
f:write("logits", m:forward({{1, 2, 3, 4, 5}}))
f:close()
"""


@pytest.mark.parametrize("opts,lopts", [({}, ""), ({"fold_ln": True, "center_unembed": False}, "{fold_ln = true, "
                                                                                               "center_unembed = false}")])
def test_process_weights_equals_lua(tmp_path, opts, lopts):
    ck = small_checkpoint(tmp_path)
    out = tmp_path / "lua_p.h5"
    line = lua(tmp_path, LUA_PROCESS % lopts, ck, out).strip().splitlines()[-1]
    applied, skipped = line.split("|")
    m = mechprobe.load(ck)
    before = m.forward([[1, 2, 3, 4, 5]])
    r = m.process_weights(**opts)
    assert ",".join(r["applied"]) == applied and ",".join(sorted(r["skipped"])) == skipped
    ref = h5read(out)
    for n in m.params():
        same(m.param(n), ref[n])
    after = m.forward([[1, 2, 3, 4, 5]])
    same(after, ref["logits"])
    # TL's processing keeps the log-probabilities (center_unembed moves logits by a constant per position)
    lp = lambda x: x - np.log(np.exp(x.astype(np.float64)).sum(-1, keepdims=True))
    np.testing.assert_allclose(lp(after), lp(before), atol=2e-5)


def test_load_keywords_equal_lua(tmp_path):
    ck = small_checkpoint(tmp_path)
    out = tmp_path / "lua_l.h5"
    lua(tmp_path, 'local m = mp.load(arg[1], {fold_ln = true, center_writing_weights = true}); '
                  'local f = mp.h5.open(arg[2], "w"); for _, n in ipairs(m:params()) do f:write(n, m:param(n)) end; '
                  'f:close()', ck, out)
    ref = h5read(out)
    m = mechprobe.load(ck, fold_ln=True, center_writing_weights=True)
    for n in m.params():
        same(m.param(n), ref[n])
    need_model()
    with pytest.raises(ValueError, match="load: .*aidreams260K.bin.*center_writing_weights"):
        mechprobe.load(MODEL, TOK, center_writing_weights=True)  # RMSNorm: does not apply


def test_process_weights_makes_mmapped_writable():
    need_model()
    m = mechprobe.load(MODEL, TOK)
    m.process_weights(fold_ln=True, center_unembed=False)
    e = m.param("embed")
    m.set_param("embed", e * 2)
    same(m.param("embed"), e * 2)


def test_mmapped_reads_and_copy_true_writes():
    """A llama2.c file's weights are its read-only memory map: m.param reads
    (equal to the same file loaded with copy=True, and to the W_Q shortcut);
    set_param / set_weight refuse naming copy=True; with copy=True they write."""
    need_model()
    m = mechprobe.load(MODEL, TOK)
    c = mechprobe.load(MODEL, TOK, copy=True)
    wq = m.param("blocks.1.attn.wq")
    same(wq, c.param("blocks.1.attn.wq"))
    cfg = m.config
    H, Dh, D = cfg["n_head"], cfg["d_head"], cfg["d_model"]
    same(wq.reshape(H, Dh, D).transpose(0, 2, 1), m.W_Q[1])
    with pytest.raises(ValueError, match=r"read-only: the weights are the read-only memory map of .*aidreams260K.bin.*"
                                         r"mechprobe.load\(path, copy=True\)"):
        m.set_param("blocks.1.attn.wq", wq)
    with pytest.raises(ValueError, match=r"W_Q is read-only.*copy=True"):
        m.set_weight("W_Q", m.W_Q)
    c.set_param("blocks.1.attn.wq", wq * 2)
    same(c.param("blocks.1.attn.wq"), wq * 2)
    same(m.param("blocks.1.attn.wq"), wq)  # the other model (the file) is untouched


def test_norm_weights_under_tl_names():
    """TransformerLens's state_dict names of the norm weights read and write the
    checkpoint-named parameters; absent ones are refused by name, as in Lua."""
    m = mechprobe.Model(SMALL, seed=2)
    rng = np.random.default_rng(1)
    for tl, ck in [("blocks.1.ln1.w", "blocks.1.ln1.weight"), ("blocks.1.ln1.b", "blocks.1.ln1.bias"),
                   ("blocks.0.ln2.w", "blocks.0.ln2.weight"), ("blocks.0.ln2.b", "blocks.0.ln2.bias"),
                   ("ln_final.w", "ln_final.weight"), ("ln_final.b", "ln_final.bias")]:
        same(m.param(tl), m.param(ck))
        v = rng.standard_normal(SMALL["d_model"]).astype(np.float32)
        m.set_param(tl, v)
        same(m.param(ck), v)
    with pytest.raises(KeyError, match=r"blocks.2.ln1.w: layer 2 out of range: the model has 2 layers \(0..1\)"):
        m.param("blocks.2.ln1.w")
    with pytest.raises(KeyError, match="no post-norms"):
        m.param("blocks.0.ln2_post.w")
    r = mechprobe.Model({"d_model": 8, "n_layer": 1, "n_head": 2, "vocab": 5, "ctx": 8, "post_norms": True,
                         "qk_norm": "head"}, seed=3)
    with pytest.raises(KeyError, match=r"RMSNorm \(norm = \"rms\"\): they have no bias"):
        r.param("blocks.0.ln1.b")
    for tl, ck in [("blocks.0.ln2_post.w", "blocks.0.ln2_post.weight"),
                   ("blocks.0.attn.k_norm.w", "blocks.0.attn.k_norm.weight")]:
        v = rng.standard_normal(r.param(ck).shape).astype(np.float32)
        r.set_param(tl, v)
        same(r.param(ck), v)
