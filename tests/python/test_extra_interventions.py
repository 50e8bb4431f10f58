"""The C interventions (mechprobe.ablate.zero / .mean, patch, steer, scale)
through m.run_with_interventions, against the Lua binding's m:forward with the
same fwd_hooks (bit for bit), closed forms, and the misuse errors."""
import numpy as np
import pytest

import mechprobe
from extra_util import MODEL, TOK, h5read, h5write, lua, need_model, same

TOKS = np.array([[1, 5, 9, 30, 7, 2, 11], [4, 3, 99, 100, 6, 8, 12]], dtype=np.int32)
OTHER = np.array([[3, 8, 20, 21, 5, 6, 40], [9, 9, 9, 1, 2, 3, 4], [7, 70, 17, 27, 37, 47, 57]], dtype=np.int32)

LUA = """
local m = mp.load(arg[1])
local d = mp.h5.open(arg[2])
local toks = {{1, 5, 9, 30, 7, 2, 11}, {4, 3, 99, 100, 6, 8, 12}}
local f = mp.h5.open(arg[3], "w")
local specs = {
  zero = {{"blocks.1.hook_resid_post", mp.ablate.zero({positions = {2, 4}})}},
  zero_head = {{"blocks.2.attn.hook_z", mp.ablate.zero({head = 1})}},
  mean = {{"blocks.0.hook_mlp_out", mp.ablate.mean(d:read("ref_mlp"))}},
  mean_pattern = {{"blocks.1.attn.hook_pattern", mp.ablate.mean(d:read("ref_pattern"), {head = 3})}},
  patch = {{"blocks.2.hook_resid_pre", mp.patch(d:read("src"), {positions = 5})}},
  steer = {{"blocks.*.hook_resid_post", mp.steer(d:read("vec"), {scale = 2.5})}},
  steer_head = {{"blocks.0.attn.hook_v", mp.steer(d:read("vec16"), {head = 2, positions = {0, 6}})}},
  scale = {{"blocks.3.attn.hook_pattern", mp.scale(0.25, {head = 0})}},
  both = {{"blocks.0.hook_resid_post", mp.scale(3)}, {"blocks.0.hook_resid_post", mp.ablate.zero({positions = 1})}},
}
for k, s in pairs(specs) do f:write(k, m:forward(toks, {fwd_hooks = s})) end
f:close()
"""


@pytest.fixture(scope="module")
def model():
    need_model()
    return mechprobe.load(MODEL, TOK)


def test_interventions_equal_lua(tmp_path, model):
    m = model
    m.capture(OTHER, str(tmp_path / "other.h5"), hooks="blocks.0.hook_mlp_out,blocks.1.attn.hook_pattern,"
                                                        "blocks.2.hook_resid_pre")
    acts = h5read(tmp_path / "other.h5")
    m.capture(TOKS[:, ::-1].copy(), str(tmp_path / "rev.h5"), hooks="blocks.2.hook_resid_pre")
    src = h5read(tmp_path / "rev.h5")["acts/blocks.2.hook_resid_pre"]
    rng = np.random.default_rng(1)
    vec, vec16 = rng.standard_normal(64).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    h5write(tmp_path / "data.h5", ref_mlp=acts["acts/blocks.0.hook_mlp_out"],
            ref_pattern=acts["acts/blocks.1.attn.hook_pattern"], src=src, vec=vec, vec16=vec16)
    lua(tmp_path, LUA, MODEL, tmp_path / "data.h5", tmp_path / "lua_iv.h5")
    ref = h5read(tmp_path / "lua_iv.h5")
    ab = mechprobe.ablate
    specs = {
        "zero": [("blocks.1.hook_resid_post", ab.zero(positions=[2, 4]))],
        "zero_head": [("blocks.2.attn.hook_z", ab.zero(head=1))],
        "mean": [("blocks.0.hook_mlp_out", ab.mean(acts["acts/blocks.0.hook_mlp_out"]))],
        "mean_pattern": [("blocks.1.attn.hook_pattern", ab.mean(acts["acts/blocks.1.attn.hook_pattern"], head=3))],
        "patch": [("blocks.2.hook_resid_pre", mechprobe.patch(src, positions=5))],
        "steer": [("blocks.*.hook_resid_post", mechprobe.steer(vec, scale=2.5))],
        "steer_head": [("blocks.0.attn.hook_v", mechprobe.steer(vec16, head=2, positions=[0, 6]))],
        "scale": [("blocks.3.attn.hook_pattern", mechprobe.scale(0.25, head=0))],
        "both": [("blocks.0.hook_resid_post", mechprobe.scale(3)),
                 ("blocks.0.hook_resid_post", ab.zero(positions=1))],
    }
    clean = m.forward(TOKS)
    for k, s in specs.items():
        out = m.run_with_interventions(TOKS, fwd_hooks=s)
        same(out, ref[k])
        assert not np.array_equal(out, clean), k  # each one changes the logits


def test_closed_forms(model):
    m = model
    clean = m.forward(TOKS)
    same(m.run_with_interventions(TOKS, fwd_hooks=[("blocks.*.hook_resid_post", mechprobe.scale(1.0))]), clean)
    same(m.run_with_interventions(TOKS, fwd_hooks=[]), clean)
    same(m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post",
                                                    mechprobe.steer(np.zeros(64, np.float32)))]), clean)
    # the last residual stream zeroed: RMSNorm of 0 is 0, so every logit is 0
    z = m.run_with_interventions(TOKS, fwd_hooks=[("blocks.3.hook_resid_post", mechprobe.ablate.zero())])
    assert np.all(z == 0)
    # positions restrict: position 6 zeroed leaves the logits of positions 0..5 alone (causal)
    p = m.run_with_interventions(TOKS, fwd_hooks=[("blocks.1.hook_resid_post", mechprobe.ablate.zero(positions=6))])
    same(p[:, :6], clean[:, :6])
    assert not np.array_equal(p[:, 6], clean[:, 6])
    last = m.run_with_interventions(TOKS, fwd_hooks=[("blocks.1.hook_resid_post", mechprobe.scale(2.0))], logits="last")
    full = m.run_with_interventions(TOKS, fwd_hooks=[("blocks.1.hook_resid_post", mechprobe.scale(2.0))])
    # "last" runs the unembedding on one row per sequence (another GEMM shape): equal to rounding
    np.testing.assert_allclose(last, full[:, -1], rtol=0, atol=1e-5)


def test_intervention_objects():
    iv = mechprobe.ablate.zero(head=2, positions=[1, 3])
    assert isinstance(iv, mechprobe.Intervention)
    assert (iv.kind, iv.head, iv.positions) == ("zero", 2, [1, 3])
    assert mechprobe.steer([1.0, 2.0], scale=0.5).scale == 0.5
    assert "zero ablation of head 2" in repr(iv)
    # the data is kept alive by the intervention
    v = mechprobe.steer(np.ones(64, dtype=np.float64))
    import gc
    gc.collect()
    assert v.kind == "steer"


def test_errors(model):
    m = model
    with pytest.raises(ValueError, match="fwd_hooks\\[0\\]: patch at position 9, but the input has T = 7"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post", mechprobe.patch(np.zeros((2, 7, 64)),
                                                                                               positions=9))])
    with pytest.raises(TypeError, match="fwd_hooks\\[0\\]: a Python function.*run_with_hooks"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post", lambda a, hook: a)])
    with pytest.raises(ValueError, match="fwd_hooks\\[0\\].*nope"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_nope", mechprobe.scale(2))])
    with pytest.raises(TypeError, match="fwd_hooks\\[1\\]: expected a pair"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post", mechprobe.scale(2)), "x"])
    with pytest.raises(ValueError, match="head"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post", mechprobe.ablate.zero(head=1))])
    with pytest.raises(ValueError, match="head"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.attn.hook_z", mechprobe.ablate.zero(head=9))])
    with pytest.raises(ValueError, match="size|elements|values"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post", mechprobe.patch(np.zeros((1, 7, 64))))])
    with pytest.raises(ValueError, match="ablate.mean: reference"):
        mechprobe.ablate.mean(np.zeros(64))
    with pytest.raises(ValueError, match="positions\\[1\\] must be an integer"):
        mechprobe.ablate.zero(positions=[1, "x"])
    with pytest.raises(ValueError, match=r"at position -8, but the input has T = 7 positions \(0..6, or -7..-1 from"):
        m.run_with_interventions(TOKS, fwd_hooks=[("blocks.0.hook_resid_post", mechprobe.ablate.zero(positions=-8))])
    with pytest.raises(ValueError, match="at most 64"):
        mechprobe.ablate.zero(positions=list(range(65)))
    with pytest.raises(ValueError, match="head must be"):
        mechprobe.scale(2.0, head=-1)


def test_negative_positions(model):
    """positions count from the end as in Python (-1 the last of T = 7): the same
    logits as the positive positions, bit for bit (as Lua's mp.ablate.zero)."""
    m = model
    hp = "blocks.0.hook_resid_post"
    neg = m.run_with_interventions(TOKS, fwd_hooks=[(hp, mechprobe.ablate.zero(positions=[-1, 1]))])
    pos = m.run_with_interventions(TOKS, fwd_hooks=[(hp, mechprobe.ablate.zero(positions=[6, 1]))])
    assert np.array_equal(np.asarray(neg), np.asarray(pos))
    assert not np.array_equal(np.asarray(pos), np.asarray(m.run_with_interventions(TOKS, fwd_hooks=[])))
