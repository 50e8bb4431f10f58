"""m.run_with_cache and the ActivationCache (python/mpy_hooks.c, python/mechprobe/cache.py)
against the Lua binding (hooks_ref.lua) on the same models, bit for bit; the
names forms; the arrays' lifetime; errors."""
import gc
import weakref

import numpy as np
import pytest

import mechprobe
from hooks_support import same



def test_cache_matches_lua(setup):
    m, toks, ref = setup
    logits, cache = m.run_with_cache(toks, names=["*", "blocks.*.attn.hook_result"])
    same(logits, ref.arrays["logits"], "logits")
    want = ref.group("cache")
    assert set(cache) == set(want)
    assert list(cache) == m.hook_names("*,blocks.*.attn.hook_result")  # firing order
    for k, v in want.items():
        same(cache[k], v, k)
    # a plain forward gives the same logits
    same(m.forward(toks), logits, "forward")


def test_helpers_match_lua(setup):
    m, toks, ref = setup
    _, cache = m.run_with_cache(toks, names=["*", "blocks.*.attn.hook_result"])
    R = ref.arrays
    same(cache.accumulated_resid(None, incl_mid=True, apply_ln=True), R["acc"], "accumulated_resid")
    same(cache.accumulated_resid(1, mlp_input=True, pos_slice=-1), R["acc_mlp"], "accumulated_resid mlp_input")
    same(cache.decompose_resid(None, apply_ln=True), R["dec"], "decompose_resid")
    same(cache.decompose_resid(1, mode="attn", pos_slice=1, apply_ln=True), R["dec_attn"], "decompose_resid attn")
    same(cache.stack_head_results(None, apply_ln=True, pos_slice=-1), R["heads"], "stack_head_results")
    _, cz = m.run_with_cache(toks)  # no hook_result: from hook_z and W_O
    same(cz.stack_head_results(), R["heads_z"], "stack_head_results from hook_z")
    dec = cache.decompose_resid(None)
    same(cache.apply_ln_to_stack(dec, None, pos_slice=-1), R["ln_stack"], "apply_ln_to_stack")
    attrs, bias = cache.logit_attrs(cache.apply_ln_to_stack(dec), 7, incorrect_tokens=9, return_bias=True)
    same(attrs, R["attrs"], "logit_attrs")
    same(bias, R["attrs_bias"], "logit_attrs bias")
    assert np.array_equal(cache.logit_attrs(cache.apply_ln_to_stack(dec), [7, 7], incorrect_tokens=9), attrs)


def test_helpers_closed_forms(setup):
    m, toks, _ = setup
    cfg = m.config
    _, cache = m.run_with_cache(toks)
    # the components of the residual sum to it (float32 rounding only)
    dec, labels = cache.decompose_resid(None, return_labels=True)
    final = cache[f"blocks.{cfg['n_layer'] - 1}.hook_resid_post"]
    np.testing.assert_allclose(dec.sum(0), final, rtol=1e-4, atol=1e-4)
    assert labels[0] == "embed" and labels[-1].endswith("_out")
    acc, al = cache.accumulated_resid(return_labels=True)
    assert al[-1] == "final_post" and acc.shape[0] == cfg["n_layer"] + 1
    assert np.array_equal(acc[0], cache["blocks.0.hook_resid_pre"])
    # the pattern's rows sum to 1
    np.testing.assert_allclose(cache["pattern", 0].sum(-1), 1.0, rtol=1e-5)
    # TL's short names and stack_activation
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert cache["resid_pre", 0] is cache["blocks.0.hook_resid_pre"]
    assert cache["scale", 0, "ln1"] is cache["blocks.0.ln1.hook_scale"]
    assert ("pattern", 0) in cache
    st = cache.stack_activation("pattern")
    assert st.shape == (cfg["n_layer"],) + cache["pattern", 0].shape
    assert np.array_equal(st[1], cache["pattern", 1])


def test_names_forms(setup):
    m, toks, _ = setup
    nl = m.config["n_layer"]
    pats = [f"blocks.{l}.attn.hook_pattern" for l in range(nl)]
    _, c1 = m.run_with_cache(toks, names="blocks.*.attn.hook_pattern")
    assert list(c1) == pats
    _, c2 = m.run_with_cache(toks, names=["blocks.0.attn.hook_pattern", "hook_embed"])
    assert list(c2) == ["hook_embed", "blocks.0.attn.hook_pattern"]  # firing order
    _, c3 = m.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_pattern"))
    assert list(c3) == pats
    _, c4 = m.run_with_cache(toks, names="hook_embed,blocks.1.hook_resid_post")
    assert list(c4) == ["hook_embed", "blocks.1.hook_resid_post"]
    _, c5 = m.run_with_cache(toks, names=lambda n: False)
    assert len(c5) == 0
    for a, b in zip(c1.values(), c3.values()):
        assert np.array_equal(a, b)
    lg, _ = m.run_with_cache(toks, names="hook_embed", logits="last")
    assert lg.shape == (toks.shape[0], m.config["vocab"])
    lg, _ = m.run_with_cache(toks, names="hook_embed", logits="none")
    assert lg is None


def test_errors(setup):
    m, toks, _ = setup
    with pytest.raises(ValueError, match="unknown hook name 'blocks.0.hook_nope'"):
        m.run_with_cache(toks, names="blocks.0.hook_nope")
    with pytest.raises(ValueError, match="unknown hook name 'blocks.99.hook_z'"):
        m.run_with_cache(toks, names=["hook_embed", "blocks.99.hook_z"])
    nl = m.config["n_layer"]
    with pytest.raises(ValueError, match=rf"layer {nl + 1} out of range: the model has {nl} layers \(0..{nl - 1}\)"):
        m.run_with_cache(toks, names=f"blocks.{nl + 1}.hook_resid_post")
    with pytest.raises(ValueError, match=rf"layer {nl} out of range: the model has {nl} layers"):
        m.run_with_hooks(toks, fwd_hooks=[(f"blocks.{nl}.hook_resid_post", lambda x, hook: None)])
    with pytest.raises(TypeError, match="names"):
        m.run_with_cache(toks, names=3)
    with pytest.raises(TypeError, match="not both"):
        m.run_with_cache(toks, names="*", names_filter="*")
    with pytest.raises(ZeroDivisionError):
        m.run_with_cache(toks, names=lambda n: 1 / 0)
    _, cache = m.run_with_cache(toks, names="hook_embed")
    with pytest.raises(KeyError, match=r"blocks.0.attn.hook_pattern.*run m.run_with_cache\(tokens, names=\.\.\.\)"):
        cache["blocks.0.attn.hook_pattern"]
    with pytest.raises(KeyError, match="incl_bwd=True"):
        cache["hook_embed_grad"]
    with pytest.raises(KeyError, match="the cache has no 'blocks.0.hook_resid_pre'"):
        cache.accumulated_resid()
    # a missing key names what was captured: all of a small cache, else the nearest names (as Lua's)
    with pytest.raises(KeyError, match="the cache has no 'hook_embd': it captured hook_embed; run"):
        cache["hook_embd"]
    _, big = m.run_with_cache(toks, names="blocks.*")
    with pytest.raises(KeyError, match=r"'blocks.1.hook_resid_pos': it captured \d+ names, the nearest "
                                       r"blocks.1.hook_resid_post, blocks.0.hook_resid_post, blocks.1.hook_resid_pre;"):
        big["blocks.1.hook_resid_pos"]
    _, cache = m.run_with_cache(toks)
    with pytest.raises(ValueError, match="pos_slice"):
        cache.accumulated_resid(pos_slice=99)
    with pytest.raises(ValueError, match="layer 0 has no heads"):
        cache.stack_head_results(0)
    with pytest.raises(ValueError, match="the stack must be"):
        cache.apply_ln_to_stack(np.zeros((2, 3)))


def test_arrays_outlive_the_model(setup, tmp_path):
    _, toks, ref = setup
    m0 = setup[0]
    # a model of its own, closed, then deleted
    src = m0.config["source"]
    m = mechprobe.load(src)
    logits, cache = m.run_with_cache(toks)
    a = cache["blocks.0.hook_resid_pre"]
    assert a.flags.owndata and a.base is None  # numpy owns the memory the core wrote into
    assert a.flags.writeable and a.dtype == np.float32 and a.flags.c_contiguous
    want = a.copy()
    m.close()
    assert np.array_equal(a, want) and np.array_equal(cache["blocks.0.hook_resid_pre"], want)
    with pytest.raises(ValueError, match="closed"):
        m.run_with_cache(toks)
    m = mechprobe.load(src)
    logits, cache = m.run_with_cache(toks)
    keep = [cache[k] for k in cache]
    w = weakref.ref(m)
    del m, cache
    gc.collect()
    assert w() is None  # the model is gone
    s = sum(float(np.abs(x[np.isfinite(x)]).sum()) for x in keep)  # under ASan: no use after free
    assert np.isfinite(s) and s > 0
    same(logits, ref.arrays["logits"], "logits after the model's end")
