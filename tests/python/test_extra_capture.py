"""Capture to HDF5 (m.capture, m.capture_prompts, mechprobe.capture) read
back with h5py: equal to the forward's logits and to the Lua binding's
run_with_cache activations, and the same datasets as the Lua capture writes
(bit for bit); interventions before the capture; the errors."""
import os

import h5py
import numpy as np
import pytest

import mechprobe
from extra_util import MODEL, TOK, h5read, lua, need_model, same

TOKS = np.array([[1, 5, 9, 30, 7, 2], [4, 3, 99, 100, 6, 8]], dtype=np.int32)
HOOKS = "blocks.0.*,blocks.2.hook_resid_post,blocks.3.attn.hook_pattern"

LUA = """
local m = mp.load(arg[1], {tokenizer = arg[2]})
local toks = {{1, 5, 9, 30, 7, 2}, {4, 3, 99, 100, 6, 8}}
local hooks = "blocks.0.*,blocks.2.hook_resid_post,blocks.3.attn.hook_pattern"
local _, cache = m:run_with_cache(toks, {names = hooks})
local f = mp.h5.open(arg[3] .. "/cache.h5", "w")
for k, v in pairs(cache) do if type(k) == "string" and type(v) == "userdata" then f:write(k, v) end end
f:close()
m:capture(toks, {out = arg[3] .. "/lua_batch.h5", hooks = hooks, logits = true})
m:capture_prompts({{1, 2, 3}, {9, 8, 7, 6, 5}, {42}}, {out = arg[3] .. "/lua_prompts.h5", hooks = "blocks.1.hook_resid_post"})
print(mp.capture{model = m, out = arg[3] .. "/lua_text.h5", text = "Once upon a time", hooks = "blocks.3.*", logits = true})
m:capture(toks, {out = arg[3] .. "/lua_iv.h5", hooks = "blocks.1.hook_resid_post,blocks.2.hook_resid_pre",
                 fwd_hooks = {{"blocks.1.hook_resid_post", mp.ablate.zero({positions = {1}})}}})
"""


@pytest.fixture(scope="module")
def model():
    need_model()
    return mechprobe.load(MODEL, TOK)


def datasets_equal(a, b):
    A, B = h5read(a), h5read(b)
    assert sorted(A) == sorted(B)
    for k in A:
        same(A[k], B[k]) if A[k].dtype.kind == "f" else np.testing.assert_array_equal(A[k], B[k])


def test_capture_equals_forward_and_lua(tmp_path, model):
    m = model
    out = tmp_path / "batch.h5"
    n = m.capture(TOKS, str(out), hooks=HOOKS, logits=True)
    line = lua(tmp_path, LUA, MODEL, TOK, tmp_path).strip().splitlines()[-1]
    with h5py.File(out, "r") as f:  # it opens in h5py
        assert n == len(f["acts"]) + 1
        np.testing.assert_array_equal(f["tokens"][()], TOKS)
        same(f["logits"][()], m.forward(TOKS))
        cache = h5read(tmp_path / "cache.h5")
        assert sorted(f["acts"]) == sorted(cache)
        for k in cache:
            same(f["acts"][k][()], cache[k])
    datasets_equal(out, tmp_path / "lua_batch.h5")
    # prompts of ragged lengths
    nd, npr = m.capture_prompts([[1, 2, 3], [9, 8, 7, 6, 5], [42]], str(tmp_path / "prompts.h5"),
                                hooks="blocks.1.hook_resid_post")
    assert npr == 3 and nd == 1
    datasets_equal(tmp_path / "prompts.h5", tmp_path / "lua_prompts.h5")
    p = h5read(tmp_path / "prompts.h5")
    np.testing.assert_array_equal(p["lengths"], [3, 5, 1])
    np.testing.assert_array_equal(p["tokens"][1], [9, 8, 7, 6, 5])
    assert np.all(p["tokens"][2, 1:] == -1)
    # mechprobe.capture from a text
    r = mechprobe.capture(m, str(tmp_path / "text.h5"), text="Once upon a time", hooks="blocks.3.*", logits=True)
    assert "\t".join(map(str, r)) == line
    datasets_equal(tmp_path / "text.h5", tmp_path / "lua_text.h5")
    t = h5read(tmp_path / "text.h5")
    same(t["logits"], m.forward("Once upon a time"))


def test_capture_with_interventions(tmp_path, model):
    m = model
    out = tmp_path / "iv.h5"
    lua(tmp_path, LUA, MODEL, TOK, tmp_path)
    m.capture(TOKS, str(out), hooks="blocks.1.hook_resid_post,blocks.2.hook_resid_pre",
              fwd_hooks=[("blocks.1.hook_resid_post", mechprobe.ablate.zero(positions=[1]))])
    a = h5read(out)
    assert np.all(a["acts/blocks.1.hook_resid_post"][:, 1] == 0)  # the capture reads after the intervention
    assert np.all(a["acts/blocks.1.hook_resid_post"][:, 0] != 0)
    same(a["acts/blocks.2.hook_resid_pre"], a["acts/blocks.1.hook_resid_post"])
    datasets_equal(out, tmp_path / "lua_iv.h5")


def test_capture_files_and_tokens(tmp_path, model):
    m = model
    tf = tmp_path / "prompts.txt"
    tf.write_text("1,2,3\n9,8,7,6,5\n42\n")
    nd, n, T = mechprobe.capture(m, str(tmp_path / "tf.h5"), tokens_file=str(tf), hooks="blocks.1.hook_resid_post")
    assert (nd, n, T) == (1, 3, 5)
    m.capture_prompts([[1, 2, 3], [9, 8, 7, 6, 5], [42]], str(tmp_path / "p.h5"), hooks="blocks.1.hook_resid_post")
    datasets_equal(tmp_path / "tf.h5", tmp_path / "p.h5")
    # attention mask of a padded batch
    toks, mask = m.to_tokens(["Once upon a time", "Hi"])
    m.capture(toks, str(tmp_path / "mask.h5"), hooks="blocks.0.hook_resid_post", attention_mask=mask, logits=True)
    f = h5read(tmp_path / "mask.h5")
    np.testing.assert_array_equal(f["attention_mask"], mask)


def test_capture_errors(tmp_path, model):
    m = model
    bad = tmp_path / "no" / "such" / "dir" / "x.h5"
    with pytest.raises(OSError, match="capture: .*no/such/dir"):
        m.capture(TOKS, str(bad))
    assert not os.path.exists(bad)
    with pytest.raises(ValueError, match="nope"):
        m.capture(TOKS, str(tmp_path / "a.h5"), hooks="blocks.0.hook_nope")
    assert not os.path.exists(tmp_path / "a.h5")
    with pytest.raises(ValueError, match="capture: tokens: token id 9999"):
        m.capture([[1, 9999]], str(tmp_path / "b.h5"))
    with pytest.raises(ValueError, match="compress must be in 0..9"):
        m.capture(TOKS, str(tmp_path / "c.h5"), compress=11)
    with pytest.raises(ValueError, match="exactly one of text, tokens, text_file and tokens_file"):
        mechprobe.capture(m, str(tmp_path / "d.h5"), text="a", tokens=[1, 2])
    with pytest.raises(OSError, match="tokens_file|missing.txt"):
        mechprobe.capture(m, str(tmp_path / "e.h5"), tokens_file=str(tmp_path / "missing.txt"))
    bad_tf = tmp_path / "bad.txt"
    bad_tf.write_text("1,2\n3,x\n")
    with pytest.raises(ValueError, match="bad.txt"):
        mechprobe.capture(m, str(tmp_path / "f.h5"), tokens_file=str(bad_tf))
    with pytest.raises(ValueError, match="attention_mask must have the tokens' shape"):
        m.capture(TOKS, str(tmp_path / "g.h5"), attention_mask=[[1, 1]])
    with pytest.raises(ValueError, match="capture_prompts: prompt 1"):
        m.capture_prompts([[1, 2], [1, -3]], str(tmp_path / "h.h5"))


def test_to_tokens_pads_lists_of_ids():
    """A list of id lists (ragged) pads as the texts that encode to them (the same
    ids and mask, either side), as m:to_tokens in Lua; ids are taken as given."""
    m = mechprobe.Model({"d_model": 16, "n_layer": 1, "n_head": 2, "d_mlp": 32, "vocab": 260, "ctx": 16},
                        tokenizer="bytes")
    for side in ("right", "left"):
        tt, tm = m.to_tokens(["ab", "hello"], padding_side=side)
        it, im = m.to_tokens([[256, 97, 98], np.array([256, 104, 101, 108, 108, 111])], padding_side=side)
        np.testing.assert_array_equal(it, tt)
        np.testing.assert_array_equal(im, tm)
    mt, mm = m.to_tokens(["ab", [104, 105, 33, 63]], prepend_bos=False)
    np.testing.assert_array_equal(mt, [[97, 98, 256, 256], [104, 105, 33, 63]])
    np.testing.assert_array_equal(mm, [[1, 1, 0, 0], [1, 1, 1, 1]])
    with pytest.raises(ValueError, match="texts\\[1\\] is an empty list of ids"):
        m.to_tokens([[1, 2], []])
    with pytest.raises(ValueError, match="texts\\[0\\]\\[1\\] must be a token id in 0..259"):
        m.to_tokens([[1, 260]])
