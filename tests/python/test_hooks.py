"""Python hook functions (TransformerLens's fn(act, hook)) on forward,
run_with_hooks, loss and generate (python/mpy_hooks.c): edits against the Lua
binding's (hooks_ref.lua) bit for bit, hooks that keep `act`, exceptions, bad
returns, re-entry, the GIL, and the per-hook overhead."""
import threading
import time

import numpy as np
import pytest

import mechprobe
from hooks_support import same




def zero_head2(act, hook):
    act[:, :, 2, :] = 0.0


def zero_head2_returned(act, hook):
    out = act.copy()
    out[:, :, 2, :] = 0.0
    return out


def test_ablation_matches_lua(setup):
    m, toks, ref = setup
    want = ref.arrays["ablated"]
    for fn in (zero_head2, zero_head2_returned):
        same(m.run_with_hooks(toks, fwd_hooks=[("blocks.1.attn.hook_z", fn)]), want, fn.__name__)
        same(m.forward(toks, fwd_hooks=[("blocks.1.attn.hook_z", fn)]), want, "forward " + fn.__name__)
    # a filter function as the name
    same(m.run_with_hooks(toks, fwd_hooks=[(lambda n: n == "blocks.1.attn.hook_z", zero_head2)]), want, "filter")
    # the cache sees the edited values
    _, cache = m.run_with_cache(toks, names="blocks.1.attn.hook_z", fwd_hooks=[("blocks.1.attn.hook_z", zero_head2)])
    assert not cache["blocks.1.attn.hook_z"][:, :, 2].any() and cache["blocks.1.attn.hook_z"][:, :, 1].any()
    # m.loss with the hook = Lua's m:loss with mp.ablate.zero{head = 2}
    row = toks[0]
    got = m.loss(row[:-1], targets=row[1:], fwd_hooks=[("blocks.1.attn.hook_z", zero_head2)])
    assert got == ref.values["loss_ablated"]
    # a hook that changes nothing leaves the logits' bits alone
    same(m.run_with_hooks(toks, fwd_hooks=[("*", lambda a, h: None)]), m.forward(toks), "no-op hooks")


def test_hook_point_and_order(setup):
    m, toks, _ = setup
    seen = []

    def rec(act, hook):
        seen.append((hook.name, hook.layer, hook.layer(), act.shape, hook.full_shape, hook.axis, hook.offset))

    m.run_with_hooks(toks, fwd_hooks=[("blocks.*.hook_resid_pre,hook_embed", rec), ("blocks.0.attn.hook_pattern", rec)])
    names = [s[0] for s in seen]
    assert names == m.hook_names("hook_embed,blocks.*.hook_resid_pre,blocks.0.attn.hook_pattern")
    B, T = toks.shape
    D, H = m.config["d_model"], m.config["n_head"]
    assert seen[0][1] == -1 and seen[1][1:3] == (0, 0)
    assert seen[0][3] == (B, T, D) and seen[0][4] == (B, T, D)
    pat = [s for s in seen if s[0].endswith("pattern")][0]
    assert pat[3] == (B, H, T, T) and pat[5] == 2 and pat[6] == 0


def test_hook_keeps_act(setup):
    m, toks, _ = setup
    kept = {}

    def keep(act, hook):
        kept[hook.name] = act  # TransformerLens's way of caching by hand

    m.run_with_hooks(toks, fwd_hooks=[("blocks.*.hook_resid_post", keep), ("blocks.0.mlp.hook_post", keep)])
    _, cache = m.run_with_cache(toks, names="blocks.*.hook_resid_post,blocks.0.mlp.hook_post")
    for _ in range(3):  # the forward's scratch memory is reused meanwhile
        m.forward(toks[:, ::-1].copy())
    assert set(kept) == set(cache)
    for k in kept:
        same(kept[k], cache[k], k)  # under ASan: no use after free
    kept["blocks.0.mlp.hook_post"][:] = 1.0  # writable, its own memory


def test_generate_with_hooks(setup):
    m, toks, _ = setup
    prompt = toks[0, :4]
    _, plain = m.generate(prompt, max_new_tokens=5, temperature=0.0, stop_at_eos=False)
    calls = []
    _, same_ids = m.generate(prompt, max_new_tokens=5, temperature=0.0, stop_at_eos=False,
                             fwd_hooks=[("blocks.0.hook_resid_pre", lambda a, h: calls.append((a.shape, h.pos0)))])
    assert np.array_equal(plain, same_ids)
    assert calls[0] == ((1, 4, m.config["d_model"]), 0)  # the prompt, then one position per step
    assert [c[1] for c in calls[1:]] == [4, 5, 6, 7]
    assert all(c[0][1] == 1 for c in calls[1:])

    def scramble(a, h):
        a[:] = a[..., ::-1]

    _, other = m.generate(prompt, max_new_tokens=5, temperature=0.0, stop_at_eos=False,
                          fwd_hooks=[("blocks.0.hook_resid_post", scramble)])
    assert not np.array_equal(plain, other)


class MyError(Exception):
    pass


def test_hook_errors(setup):
    m, toks, _ = setup
    want = m.forward(toks)

    def boom(act, hook):
        raise MyError(f"boom at {hook.name}")

    with pytest.raises(MyError, match="boom at blocks.1.hook_resid_pre") as e:
        m.run_with_hooks(toks, fwd_hooks=[("blocks.1.hook_resid_pre", boom)])
    assert e.traceback[-1].name == "boom"  # the original exception, with its traceback
    with pytest.raises(MyError):
        m.loss(toks[0], fwd_hooks=[("hook_embed", boom)])
    with pytest.raises(MyError):
        m.generate(toks[0, :3], max_new_tokens=2, fwd_hooks=[("hook_embed", boom)])
    with pytest.raises(MyError):
        m.run_with_cache(toks, fwd_hooks=[("hook_embed", boom)])
    # wrong shapes and types of a returned value
    with pytest.raises(ValueError, match=r"hook at blocks.0.attn.hook_z returned an array of shape \(3,\) for an "
                                         r"activation of shape \(2, \d+, \d+, \d+\)"):
        m.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_z", lambda a, h: np.zeros(3))])
    with pytest.raises(TypeError, match="hook at hook_embed returned a str"):
        m.run_with_hooks(toks, fwd_hooks=[("hook_embed", lambda a, h: "x")])
    # bad names and entries
    with pytest.raises(ValueError, match=r"fwd_hooks\[0\]: unknown hook name 'blocks.0.hook_nope'"):
        m.run_with_hooks(toks, fwd_hooks=[("blocks.0.hook_nope", boom)])
    with pytest.raises(TypeError, match=r"fwd_hooks\[1\]: the hook must be a function"):
        m.run_with_hooks(toks, fwd_hooks=[("hook_embed", boom), ("hook_embed", 3)])
    with pytest.raises(TypeError, match=r"fwd_hooks\[0\]: a \(name, function\) pair"):
        m.run_with_hooks(toks, fwd_hooks=["hook_embed"])
    # re-entry from a hook is refused, and so is closing the model
    def reenter(act, hook):
        m.forward(toks)

    with pytest.raises(RuntimeError, match="running a forward pass"):
        m.run_with_hooks(toks, fwd_hooks=[("hook_embed", reenter)])
    with pytest.raises(RuntimeError, match="running a forward pass"):
        m.run_with_hooks(toks, fwd_hooks=[("hook_embed", lambda a, h: m.close())])
    # the model is intact after every failure
    same(m.forward(toks), want, "logits after the errors")


def test_gil_released_during_forward(tmp_path):
    """A forward without Python hooks runs with the GIL released: another Python
    thread runs meanwhile."""
    m = mechprobe.Model({"d_model": 128, "n_layer": 4, "n_head": 4, "vocab": 64, "ctx": 512}, seed=1)
    toks = np.arange(4 * 384).reshape(4, 384) % 64
    m.forward(toks, logits="none")  # warm up
    t0 = time.perf_counter()
    m.forward(toks, logits="none")
    dur = time.perf_counter() - t0
    marks = {}

    def work():
        marks["start"] = time.perf_counter()
        m.forward(toks, logits="none")
        marks["end"] = time.perf_counter()

    th = threading.Thread(target=work)
    th.start()
    while "start" not in marks:
        time.sleep(0.0005)
    time.sleep(min(0.02, dur / 10))
    marks["main"] = time.perf_counter()  # Python ran here: the forward had let the GIL go
    th.join()
    assert marks["start"] < marks["main"] < marks["end"], marks
    # held, the main thread would run only once the forward had returned
    assert marks["end"] - marks["main"] > 0.5 * (marks["end"] - marks["start"]), (marks, dur)


def test_hook_overhead(setup, capsys):
    """Measures the cost of one Python hook call (copy in, call, copy out)."""
    m, toks, _ = setup
    nl = m.config["n_layer"]
    n = 30
    noop = lambda a, h: None  # noqa: E731
    hooks = [("blocks.*.hook_resid_pre,blocks.*.hook_resid_post,blocks.*.hook_mlp_out,blocks.*.hook_attn_out", noop)]
    calls = 4 * nl
    m.forward(toks)
    best_plain = best_hooked = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            m.forward(toks)
        best_plain = min(best_plain, (time.perf_counter() - t) / n)
        t = time.perf_counter()
        for _ in range(n):
            m.run_with_hooks(toks, fwd_hooks=hooks)
        best_hooked = min(best_hooked, (time.perf_counter() - t) / n)
    per = (best_hooked - best_plain) / calls * 1e6
    with capsys.disabled():
        print(f"\n[hook overhead] {m.config['source']}: {toks.shape}, d_model {m.config['d_model']}: "
              f"{per:.1f} us per hook call ({calls} calls per forward)")
    assert per < 2000  # generous: a shared 2-core machine
