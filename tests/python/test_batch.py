"""Batched generate and the gradients of a padded batch from Python (issue #44):
m.generate on a list of prompts of different lengths (token lists, texts, tokens
[B, T] + attention_mask, to_tokens' pair) gives row b as the prompt alone with
the same seed (greedy and sampled, per-row seeds), equal bit for bit to the Lua
binding's batch (the same C function, mp_model_generate_batch); one prompt keeps
(text, ids); loss / incl_bwd with attention_mask give each row's gradients as
the row run alone (5e-5 of the largest entry: float32 rounding), zeros at pads,
and "ce" ignores pad targets; attribution_patch takes attention_mask."""
import numpy as np
import pytest

import mechprobe
from extra_util import MODEL, TOK, lua, need_model

CFG = {"d_model": 32, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "vocab": 24, "ctx": 32}
PROMPTS = [[3, 5, 7], [1, 2, 3, 4, 5, 6, 7, 8], [9], [9, 8, 4, 2, 11]]


@pytest.fixture(scope="module")
def m():
    with mechprobe.Model(CFG, seed=3, init_std=0.3) as model:
        yield model


@pytest.mark.parametrize("kw", [dict(temperature=0.0), dict(temperature=1.0, top_p=0.9, seed=77),
                                dict(temperature=1.5, top_p=1.0)])
def test_rows_as_alone(m, kw):
    texts, rows = m.generate(PROMPTS, max_new_tokens=10, **kw)
    assert texts is None and len(rows) == len(PROMPTS)
    for p, r in zip(PROMPTS, rows):
        _, one = m.generate(p, max_new_tokens=10, **kw)
        assert r.dtype == np.int32 and np.array_equal(r, one)
        assert len(one) == len(p) + 10


def test_seeds_and_forms(m):
    seeds = [5, 6, 7, 8]
    _, rows = m.generate(PROMPTS, max_new_tokens=8, temperature=1.0, seed=seeds)
    for p, r, s in zip(PROMPTS, rows, seeds):
        assert np.array_equal(r, m.generate(p, max_new_tokens=8, temperature=1.0, seed=s)[1])
    # tokens [B, T] + attention_mask, left and right padded: the mask's real tokens are the rows
    _, want = m.generate(PROMPTS, max_new_tokens=6, temperature=0.0)
    T = max(map(len, PROMPTS))
    for left in (False, True):
        tok = np.zeros((len(PROMPTS), T), np.int32)
        mask = np.zeros_like(tok)
        for b, p in enumerate(PROMPTS):
            o = T - len(p) if left else 0
            tok[b, o:o + len(p)] = p
            mask[b, o:o + len(p)] = 1
        _, got = m.generate(tok, max_new_tokens=6, temperature=0.0, attention_mask=mask)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        _, got = m.generate((tok, mask), max_new_tokens=6, temperature=0.0)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    # one prompt: (None, ids) as before
    text, ids = m.generate(PROMPTS[0], max_new_tokens=4, temperature=0.0)
    assert text is None and isinstance(ids, np.ndarray) and ids.shape == (7,)
    with pytest.raises(ValueError, match="2 seeds for 4 prompts"):
        m.generate(PROMPTS, seed=[1, 2])
    with pytest.raises(ValueError, match="empty"):
        m.generate([[1, 2], []])


def test_hooks_fire_and_edit(m):
    shapes = []
    edit = [("blocks.1.mlp.hook_post", lambda a, hook: a * 0.25)]
    _, rows = m.generate(PROMPTS, max_new_tokens=6, temperature=0.0,
                         fwd_hooks=[("blocks.0.hook_resid_post", lambda a, hook: shapes.append(a.shape))] + edit)
    assert len(shapes) == 6 and shapes[0][:2] == (4, 8) and shapes[1][:2] == (4, 1)
    for p, r in zip(PROMPTS, rows):
        assert np.array_equal(r, m.generate(p, max_new_tokens=6, temperature=0.0, fwd_hooks=edit)[1])


def test_same_as_lua(m, tmp_path):
    path = tmp_path / "m.h5"
    m.save(str(path))
    out = lua(tmp_path, """
local m = mp.load(arg[1])
local _, rows = m:generate({{3, 5, 7}, {1, 2, 3, 4, 5, 6, 7, 8}, {9}, {9, 8, 4, 2, 11}},
                           {max_new_tokens = 9, temperature = 1.0, top_p = 0.9, seed = {1, 2, 3, 4}})
for _, r in ipairs(rows) do print(table.concat(r, " ")) end
""", path)
    with mechprobe.load(str(path)) as m2:
        _, rows = m2.generate(PROMPTS, max_new_tokens=9, temperature=1.0, top_p=0.9, seed=[1, 2, 3, 4])
    assert [" ".join(map(str, r)) for r in rows] == out.split("\n")[:-1]


def test_texts_stop_at_eos():
    need_model()
    with mechprobe.load(MODEL, tokenizer=TOK) as am:
        texts = ["Once upon a time", "The cat", "Lily and her mom went to the park and"]
        out, rows = am.generate(texts, max_new_tokens=200, temperature=0.8, seed=11)
        lens = set()
        for t, o, r in zip(texts, out, rows):
            t1, one = am.generate(t, max_new_tokens=200, temperature=0.8, seed=11)
            assert o == t1 and np.array_equal(r, one)
            lens.add(len(one))
        assert len(lens) > 1  # the rows stop (at EOS) at different lengths


def padded(left):
    T = max(map(len, PROMPTS))
    tok = np.zeros((len(PROMPTS), T), np.int32)
    mask = np.zeros_like(tok)
    off = []
    for b, p in enumerate(PROMPTS):
        o = T - len(p) if left else 0
        tok[b, o:o + len(p)] = p
        mask[b, o:o + len(p)] = 1
        off.append(o)
    return tok, mask, off


@pytest.mark.parametrize("left", [False, True])
def test_grads_of_padded_batch(m, left):
    tok, mask, off = padded(left)
    rows = [p for p in PROMPTS if len(p) > 1]  # "ce" needs a counted position
    tok, mask = tok[[len(p) > 1 for p in PROMPTS]], mask[[len(p) > 1 for p in PROMPTS]]
    off = [o for o, p in zip(off, PROMPTS) if len(p) > 1]
    tg = np.full_like(tok, 7)  # pad targets (and the last real one's) must be ignored
    single, count, wsum = [], 0, 0.0
    for b, p in enumerate(rows):
        t1 = np.array([p[1:] + [-1]], np.int32)
        tg[b, off[b]:off[b] + len(p)] = t1[0]
        _, c1 = m.run_with_cache(np.array([p], np.int32), incl_bwd=True, loss="ce", targets=t1)
        single.append(c1)
        count += len(p) - 1
        wsum += c1.loss * (len(p) - 1)
    _, cache = m.run_with_cache(tok, incl_bwd=True, loss="ce", targets=tg, attention_mask=mask)
    assert abs(cache.loss - wsum / count) <= 1e-5
    names = [k for k in cache.keys() if k.endswith("_grad")]
    assert len(names) > 20
    for k in names:
        g = np.asarray(cache[k])
        maps = "hook_pattern" in k or "hook_attn_scores" in k
        for b, p in enumerate(rows):
            g1 = np.asarray(single[b][k])[0] * ((len(p) - 1) / count)
            o, n = off[b], len(p)
            got = g[b][:, o:o + n, o:o + n] if maps else g[b][o:o + n]
            assert np.max(np.abs(got - g1)) <= 5e-5 * max(np.max(np.abs(g1)), 1e-30), k
            pads = mask[b] == 0
            if maps:
                assert not np.any(g[b][:, pads, :]) and not np.any(g[b][:, :, pads]), k
            else:
                assert not np.any(g[b][pads]), k


def test_attribution_with_mask(m):
    tok, mask, off = padded(True)
    corrupt = np.where(mask == 1, (tok + 3) % 24, tok).astype(np.int32)
    name = "blocks.0.hook_resid_mid"
    est, _ = m.attribution_patch(tok, corrupt, name, {"logit_diff": (4, 9)}, per="all", attention_mask=mask)
    want = 0.0
    for b, p in enumerate(PROMPTS):
        o = off[b]
        e1, _ = m.attribution_patch(np.array([p], np.int32), corrupt[b:b + 1, o:o + len(p)], name,
                                    {"logit_diff": (4, 9)}, per="all")
        want += float(np.asarray(e1[name])[0]) / len(PROMPTS)
    assert abs(float(np.asarray(est[name])[0]) - want) <= 1e-5 * max(1.0, abs(want))
