"""Gradients from Python (python/mpy_hooks.c over runtime/grad.h): loss="ce" /
{"logit_diff": ...} / a function, incl_bwd's <hook>_grad entries, bwd_hooks and
attribution patching against the Lua binding (hooks_ref.lua) bit for bit; the
metrics' closed forms; errors."""

import numpy as np
import pytest

import mechprobe
from hooks_support import same




def next_targets(toks):
    tg = np.full_like(toks, -1)
    tg[:, :-1] = toks[:, 1:]
    return tg


def test_ce_grads_match_lua(setup):
    m, toks, ref = setup
    tg = next_targets(toks)
    logits, cache = m.run_with_cache(toks, names="blocks.*", incl_bwd=True, loss="ce", targets=tg)
    want = ref.group("ce_grad")
    got = {k: v for k, v in cache.items() if k.endswith("_grad")}
    assert set(got) == set(want) and len(got) > 0
    for k in want:
        same(got[k], want[k], k)
        assert got[k].shape == cache[k[:-5]].shape
    assert cache.loss == ref.values["ce"]
    # the value is m.loss's (the same cross-entropy), and the logits a forward's
    assert cache.loss == pytest.approx(m.loss(toks[:, :-1], targets=toks[:, 1:]), rel=1e-6)
    same(logits, m.forward(toks), "logits of the gradient pass")
    # m.forward / run_with_hooks with a loss: (logits, value)
    lg, v = m.forward(toks, loss="ce", targets=tg)
    assert v == cache.loss
    lg, v = m.run_with_hooks(toks, loss="ce", targets=tg)
    assert v == cache.loss


def test_logit_diff_and_function_match_lua(setup):
    m, toks, ref = setup
    logits, c = m.run_with_cache(toks, names="hook_embed,blocks.0.attn.hook_pattern", incl_bwd=True,
                                 loss={"logit_diff": (5, 6)})
    same(c["hook_embed_grad"], ref.arrays["ld_embed_grad"], "hook_embed_grad")
    same(c["blocks.0.attn.hook_pattern_grad"], ref.arrays["ld_pattern_grad"], "pattern_grad")
    assert c.loss == ref.values["logit_diff"]
    # closed form: the mean logit difference at the last position
    B = toks.shape[0]
    want = sum(float(logits[b, -1, 5]) - float(logits[b, -1, 6]) for b in range(B)) / B
    assert c.loss == want
    # the same with per-row ids
    _, c2 = m.run_with_cache(toks, names="hook_embed", incl_bwd=True, loss={"logit_diff": ([5] * B, [6] * B)})
    same(c2["hook_embed_grad"], c["hook_embed_grad"], "per-row ids")
    _, c3 = m.run_with_cache(toks, names="hook_embed", incl_bwd=True, loss={"logit_diff": (np.int64(5), np.int32(6))})
    same(c3["hook_embed_grad"], c["hook_embed_grad"], "numpy integer ids")
    # the gradient above the diagonal of the pattern is 0
    g = c["blocks.0.attn.hook_pattern_grad"]
    T = toks.shape[1]
    assert not g[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]].any()

    def metric(lg):
        V = lg.shape[2]
        d = np.zeros(lg.shape, dtype=np.float32)
        v = 0.0
        for b in range(B):
            v = v + float(lg[b, T - 1, 3]) / B
            d[b, T - 1, 3] = np.float32(1.0) / np.float32(B)
        return v, d

    _, cf = m.run_with_cache(toks, names="blocks.0.hook_resid_post", incl_bwd=True, loss=metric)
    same(cf["blocks.0.hook_resid_post_grad"], ref.arrays["fn_grad"], "function loss grad")
    assert cf.loss == ref.values["fn"]


def test_bwd_hooks_match_lua(setup):
    m, toks, ref = setup
    seen = []

    def zero_head1(g, hook):
        seen.append((hook.name, g.shape))
        g[:, :, 1, :] = 0.0

    _, c = m.run_with_cache(toks, names="hook_embed,blocks.1.hook_resid_mid", incl_bwd=True,
                            loss={"logit_diff": (5, 6)}, bwd_hooks=[("blocks.1.attn.hook_z", zero_head1)])
    same(c["hook_embed_grad"], ref.arrays["bwd_embed_grad"], "hook_embed_grad")
    same(c["blocks.1.hook_resid_mid_grad"], ref.arrays["bwd_mid_grad"], "resid_mid_grad")
    assert [s[0] for s in seen] == ["blocks.1.attn.hook_z"]
    # returning a replacement does the same
    _, c2 = m.run_with_cache(toks, names="hook_embed", incl_bwd=True, loss={"logit_diff": (5, 6)},
                             bwd_hooks=[("blocks.1.attn.hook_z",
                                         lambda g, h: np.concatenate([g[:, :, :1], 0 * g[:, :, 1:2], g[:, :, 2:]], 2))])
    same(c2["hook_embed_grad"], c["hook_embed_grad"], "returned replacement")
    # the order: reverse firing order
    order = []
    m.run_with_hooks(toks, loss={"logit_diff": (5, 6)},
                     bwd_hooks=[("hook_embed,blocks.*.hook_resid_post", lambda g, h: order.append(h.name))])
    assert order == m.hook_names("hook_embed,blocks.*.hook_resid_post")[::-1]
    # zeroing everything flowing back through block 1's input leaves the embedding no gradient
    _, c3 = m.run_with_cache(toks, names="hook_embed", incl_bwd=True, loss={"logit_diff": (5, 6)},
                             bwd_hooks=[("blocks.1.hook_resid_pre", lambda g, h: np.zeros_like(g))])
    assert not c3["hook_embed_grad"].any()


def test_attribution_patch_matches_lua(setup):
    m, toks, ref = setup
    corrupt = toks[:, ::-1].copy()
    ap, vals = mechprobe.attribution_patch(m, toks, corrupt, "blocks.*.attn.hook_z", {"logit_diff": (5, 6)},
                                           per="head_position")
    want = ref.group("ap_z")
    assert list(ap) == m.hook_names("blocks.*.attn.hook_z") and set(ap) == set(want)
    for k in want:
        same(ap[k], want[k], k)
    assert vals == {"clean": ref.values["ap_z_clean"], "corrupt": ref.values["ap_z_corrupt"]}
    ap2, vals2 = m.attribution_patch(toks, corrupt, ["blocks.*.hook_resid_pre"], "ce", per="neuron",
                                     targets=next_targets(toks))
    want = ref.group("ap_resid")
    for k in want:
        same(ap2[k], want[k], k)
    assert vals2 == {"clean": ref.values["ap_resid_clean"], "corrupt": ref.values["ap_resid_corrupt"]}
    # closed form: (clean - corrupt) * grad summed, from run_with_cache's own arrays
    _, cc = m.run_with_cache(toks, names="ln_final.hook_normalized")
    _, cx = m.run_with_cache(corrupt, names="ln_final.hook_normalized", incl_bwd=True, loss={"logit_diff": (5, 6)})
    a, _ = m.attribution_patch(toks, corrupt, "ln_final.hook_normalized", {"logit_diff": (5, 6)}, per="all")
    x = "ln_final.hook_normalized"
    est = ((cc[x].astype(np.float64) - cx[x]) * cx[x + "_grad"]).sum()
    assert a[x][0] == pytest.approx(est, rel=1e-5, abs=1e-6)


def test_grad_errors(setup):
    m, toks, _ = setup
    with pytest.raises(ValueError, match="incl_bwd=True needs a loss="):
        m.run_with_cache(toks, incl_bwd=True)
    with pytest.raises(ValueError, match="bwd_hooks needs a loss="):
        m.run_with_hooks(toks, bwd_hooks=[("hook_embed", lambda g, h: None)])
    with pytest.raises(ValueError, match="targets= is for loss=\"ce\""):
        m.run_with_hooks(toks, targets=toks)
    with pytest.raises(ValueError, match="unknown loss 'mse'"):
        m.run_with_hooks(toks, loss="mse")
    with pytest.raises(ValueError, match="needs targets="):
        m.run_with_hooks(toks, loss="ce")
    with pytest.raises(ValueError, match=r"targets: shape \[1, 3\] differs"):
        m.run_with_hooks(toks, loss="ce", targets=[1, 2, 3])
    with pytest.raises(ValueError, match="wrong id 99999 is out of range"):
        m.run_with_hooks(toks, loss={"logit_diff": (1, 99999)})
    with pytest.raises(ValueError, match="dlogits has shape"):
        m.run_with_cache(toks, names="hook_embed", incl_bwd=True, loss=lambda lg: (1.0, np.zeros(3)))
    with pytest.raises(ValueError, match="must be \"all\" with a loss"):
        m.run_with_hooks(toks, loss={"logit_diff": (1, 2)}, logits="last")
    with pytest.raises(ValueError, match="no gradient at hook blocks.0.hook_attn_in yet"):
        m.run_with_cache(toks, names="blocks.0.hook_attn_in", incl_bwd=True, loss={"logit_diff": (1, 2)})
    with pytest.raises(ValueError, match=r"bwd_hooks\[0\]: no gradient at hook blocks.0.hook_attn_in yet"):
        m.run_with_hooks(toks, loss={"logit_diff": (1, 2)}, bwd_hooks=[("blocks.0.hook_attn_in", lambda g, h: None)])
    # a glob skips the points without a gradient (cached, with no _grad)
    _, c = m.run_with_cache(toks, names="blocks.0.*,blocks.0.hook_attn_in", incl_bwd=True, loss={"logit_diff": (1, 2)})
    assert "blocks.0.hook_attn_in" in c and "blocks.0.hook_attn_in_grad" not in c
    assert "blocks.0.ln1.hook_scale_grad" in c

    class Oops(Exception):
        pass

    def bad(g, h):
        raise Oops("in a backward hook")

    with pytest.raises(Oops):
        m.run_with_hooks(toks, loss={"logit_diff": (1, 2)}, bwd_hooks=[("hook_embed", bad)])
    with pytest.raises(ValueError, match="does not apply to blocks.0.attn.hook_z"):
        m.attribution_patch(toks, toks, "blocks.0.attn.hook_z", {"logit_diff": (1, 2)}, per="neuron")
    with pytest.raises(ValueError, match="must match"):
        m.attribution_patch(toks, toks[:, :3], "hook_embed", {"logit_diff": (1, 2)})
    with pytest.raises(ValueError, match="selects no hook point with a gradient"):
        m.attribution_patch(toks, toks, "blocks.*.hook_attn_in", {"logit_diff": (1, 2)})
    # a padded batch's gradients: tests/python/test_batch.py; an all-ones mask is the unpadded batch
    _, v = m.run_with_hooks(toks, loss={"logit_diff": (1, 2)}, attention_mask=np.ones_like(toks))
    _, v0 = m.run_with_hooks(toks, loss={"logit_diff": (1, 2)})
    assert abs(v - v0) <= 1e-6 * max(1.0, abs(v0))
