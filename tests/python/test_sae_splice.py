"""SAEs attached to a model from Python (python/mpy_sae_splice.c; SAELens's
HookedSAETransformer names): every result equals the Lua binding's on the same
model, SAEs and tokens bit for bit (sae_splice_ref.lua through the mechprobe
CLI: the same C path, hooks/sae_splice.c), plus closed forms (the error term
with no edit is the clean run, bitwise; a Python hook replacing the point by
sae.forward equals the splice) and the refusals."""
import os

import numpy as np
import pytest

import mechprobe
from hooks_support import HERE, run_lua

H, Z = "blocks.0.hook_resid_post", "blocks.1.attn.hook_z"
P = H + ".hook_sae_acts_post"
TOKS = np.array([[1, 4, 2, 7, 3, 9], [5, 2, 8, 1, 11, 6]], dtype=np.int32)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    import h5py
    d = str(tmp_path_factory.mktemp("sae_splice"))
    run_lua(os.path.join(HERE, "sae_splice_ref.lua"), d)
    arrays = {}
    with h5py.File(os.path.join(d, "ref.h5"), "r") as f:
        f.visititems(lambda n, o: arrays.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    vals = {}
    with open(os.path.join(d, "ref.txt")) as f:
        for line in f:
            k, v = line.split()
            vals[k] = float(v)
    return d, arrays, vals


@pytest.fixture
def msae(ref):
    d = ref[0]
    m = mechprobe.load(os.path.join(d, "model.h5"))
    s1 = mechprobe.SAE.load(os.path.join(d, "sae_resid"))
    s2 = mechprobe.SAE.load(os.path.join(d, "sae_z"))
    yield m, s1, s2
    m.close()


def test_forward_cache_and_names_match_lua(ref, msae):
    _, a, v = ref
    m, s1, s2 = msae
    clean = m.forward(TOKS)
    names0 = set(m.hook_names())
    m.add_sae(s1)
    m.add_sae(s2, use_error_term=True)
    assert m.saes == [s1, s2] and m.acts_to_saes == {H: s1, Z: s2}
    assert np.array_equal(m.forward(TOKS), a["fwd"])
    assert np.array_equal(clean, a["clean"])
    added = set(m.hook_names()) - names0
    assert added == {H + ".hook_sae_" + k for k in ("input", "acts_pre", "acts_post", "recons", "output")} | \
        {Z + ".hook_sae_" + k for k in ("input", "acts_pre", "acts_post", "recons", "error", "output")}
    names = [P, H + ".hook_sae_recons", Z + ".hook_sae_error", Z]
    lg, cache = m.run_with_cache(TOKS, names=names)
    assert np.array_equal(lg, a["fwd"])
    for n in names:
        assert np.array_equal(cache[n], a["cache/" + n]), n
    assert cache[P].shape == (2, 6, 16)
    # a filter function sees the sub-points too
    _, c2 = m.run_with_cache(TOKS, names_filter=lambda n: n.endswith("hook_sae_acts_post"))
    assert sorted(c2.keys()) == sorted([P, Z + ".hook_sae_acts_post"])
    assert m.loss(np.array([[1, 4, 2, 7, 3]]), np.array([[4, 2, 7, 3, 9]])) == pytest.approx(v["loss"], abs=0)


def test_interventions_python_hooks_grad_attribution_match_lua(ref, msae):
    _, a, v = ref
    m, s1, s2 = msae
    m.add_sae(s1)
    m.add_sae(s2, use_error_term=True)
    vec = np.zeros(16, dtype=np.float32)
    vec[3] = 2.0
    assert np.array_equal(m.forward(TOKS, fwd_hooks=[(P, mechprobe.steer(vec))]), a["steer"])
    # the same steering as a Python function at the sub-point (copy-in / copy-out: the same floats)
    def add(act, hook):
        assert hook.name == P and act.shape == (2, 6, 16)
        act[..., 3] += 2.0
    assert np.array_equal(m.run_with_hooks(TOKS, fwd_hooks=[(P, add)]), a["steer"])
    names = f"{P},{H}.hook_sae_input,{Z}.hook_sae_acts_pre"
    spec = {"logit_diff": ([3, 4], [2, 10])}
    _, g = m.run_with_cache(TOKS, names=names, incl_bwd=True, loss=spec)
    assert g.loss == v["ld"]
    for n in names.split(","):
        assert np.array_equal(g[n + "_grad"], a["grad/" + n + "_grad"]), n
    # bwd_hooks at a sub-point see the same gradient
    seen = {}
    m.run_with_hooks(TOKS, bwd_hooks=[(P, lambda gr, hook: seen.__setitem__("g", gr.copy()))], loss=spec)
    assert np.array_equal(seen["g"], a["grad/" + P + "_grad"])
    attr, vals = m.attribution_patch([[1, 4, 2, 7, 3, 9]], [[1, 4, 2, 5, 3, 9]], P, {"logit_diff": (3, 2)},
                                     per="neuron")
    assert np.array_equal(attr[P], a["attr"])
    assert vals == {"clean": v["attr_clean"], "corrupt": v["attr_corrupt"]}


def test_run_with_saes_matches_lua_and_detaches(ref, msae):
    _, a, v = ref
    m, s1, s2 = msae
    assert np.array_equal(m.run_with_saes(TOKS, saes=[s1, s2]), a["rws"])
    assert m.saes == [] and v["n_after"] == 0
    lg, cache = m.run_with_cache_with_saes(TOKS, saes=s1, names=[P])
    assert m.saes == [] and set(cache.keys()) == {P}
    # the features are the SAE's encode of the hook's input, the output its forward
    _, c0 = m.run_with_cache(TOKS, names=[H])
    np.testing.assert_allclose(cache[P], s1.encode(c0[H]), rtol=0, atol=1e-6)
    # reset_saes_end=False keeps them attached (SAELens)
    m.run_with_saes(TOKS, saes=[s1], reset_saes_end=False)
    assert m.saes == [s1]
    m.reset_saes(act_names=[H])
    assert m.saes == []


def test_closed_forms(msae):
    m, s1, s2 = msae
    clean = m.forward(TOKS)
    # with the error term and no edit the run is the clean run, bitwise
    m.add_sae(s1, use_error_term=True)
    assert np.array_equal(m.forward(TOKS), clean)
    assert np.array_equal(m.run_with_hooks(TOKS, fwd_hooks=[(P, lambda a, h: None)]), clean)
    m.reset_saes()
    # without: the activation replaced by sae.forward (a Python hook at the point itself)
    m.add_sae(s2)
    spliced = m.forward(TOKS)
    m.reset_saes()
    by_hand = m.run_with_hooks(TOKS, fwd_hooks=[(Z, lambda a, h: s2.forward(a.reshape(2, 6, 8)).reshape(a.shape))])
    np.testing.assert_allclose(spliced, by_hand, rtol=0, atol=1e-5)
    assert np.abs(spliced - clean).max() > 1e-4
    # run_with_interventions and generate see the SAE too
    m.add_sae(s2)
    assert np.array_equal(m.run_with_interventions(TOKS), spliced)
    text, ids = m.generate(TOKS[0], max_new_tokens=3, temperature=0.0)
    m.reset_saes()
    assert list(ids[:6]) == list(TOKS[0])


def test_refusals_and_lifetime(ref, msae):
    m, s1, s2 = msae
    m.add_sae(s1)
    with pytest.raises(ValueError, match="has an SAE|already"):
        m.add_sae(s1)
    with pytest.raises(RuntimeError, match="attached to a model"):
        s1.close()
    with pytest.raises(TypeError, match="mechprobe.SAE"):
        m.add_sae("not an sae")
    with pytest.raises(TypeError, match="saes="):
        m.run_with_saes(TOKS)
    bad = mechprobe.SAE(d_in=5, d_sae=4, hook_name=H)
    with pytest.raises(ValueError, match="5"):
        m.add_sae(bad)
    nohook = mechprobe.SAE(d_in=8, d_sae=4, hook_name="blocks.9.hook_resid_post")
    with pytest.raises(ValueError, match="blocks.9"):
        m.run_with_saes(TOKS, saes=[nohook])
    assert m.saes == [s1]  # a failed run_with_saes leaves the list as it was
    with pytest.raises(ValueError, match="unknown hook name"):
        m.run_with_cache(TOKS, names=[Z + ".hook_sae_acts_post"])  # no SAE at Z
    # an exception in a hook during run_with_saes: the SAEs are still detached
    def boom(a, h):
        raise KeyError("boom")
    with pytest.raises(KeyError):
        m.run_with_saes(TOKS, saes=[s2], fwd_hooks=[(Z + ".hook_sae_acts_post", boom)])
    assert m.saes == [s1]
    # a hook cannot change the attached list (the model is busy)
    def attach(a, h):
        m.add_sae(s2)
    with pytest.raises(RuntimeError):
        m.run_with_hooks(TOKS, fwd_hooks=[(P, attach)])
    m.reset_saes()
    s1.close()
    # closing the model detaches: the SAE can be closed after
    m.add_sae(s2)
    m.close()
    s2.close()
    assert s2.closed
