"""Saving (every format, round trips, read by the Lua binding) and training
(m.train_step, m.train with a task) against the Lua binding's m:train_step /
m:train on the same model and batches (losses, gradient norms and weights bit
for bit), the optimizer kept on the model and in its checkpoint, and errors."""
import os

import numpy as np
import pytest

import mechprobe
from extra_util import MODEL, SMALL, TOK, h5read, h5write, lua, need_model, same, small_checkpoint


def batches(n, B=3, T=8, V=61, seed=5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.integers(0, V, size=(B, T + 1))
        out.append((x[:, :-1].astype(np.int32), x[:, 1:].astype(np.int32)))
    return out


LUA_STEP = """
local m = mp.load(arg[1])
local d = mp.h5.open(arg[2])
local opt = mp.optim.adamw{lr = 1e-2, weight_decay = 0.05, warmup = 1}
for i = 1, 3 do
  local loss, gn = m:train_step(opt, d:read_int("x" .. i), d:read_int("y" .. i))
  print(string.format("%.9g %.17g", loss, gn))
end
local f = mp.h5.open(arg[3], "w")
for _, n in ipairs(m:params()) do f:write(n, m:param(n)) end
f:close()
"""


def test_train_step_equals_lua(tmp_path):
    ck = small_checkpoint(tmp_path)
    bs = batches(3)
    h5write(tmp_path / "b.h5", **{f"x{i + 1}": x for i, (x, _) in enumerate(bs)},
            **{f"y{i + 1}": y for i, (_, y) in enumerate(bs)})
    out = lua(tmp_path, LUA_STEP, ck, tmp_path / "b.h5", tmp_path / "lw.h5").strip().splitlines()[-3:]
    m = mechprobe.load(ck)
    assert m.optimizer is None
    got = []
    for x, y in bs:
        loss, gn = m.train_step(x, y, lr=1e-2, weight_decay=0.05, warmup=1)
        got.append(f"{np.float32(loss):.9g} {gn:.17g}")
    assert got == out
    ref = h5read(tmp_path / "lw.h5")
    for n in m.params():
        same(m.param(n), ref[n])
    o = m.optimizer
    assert o["step"] == 3 and abs(o["lr"] - 1e-2) < 1e-9 and o["warmup"] == 1
    # the first step's loss is the model's loss before any update
    fresh = mechprobe.load(ck)
    assert abs(float(out[0].split()[0]) - fresh.loss(bs[0][0], bs[0][1])) < 1e-6


def test_optimizer_travels_in_the_checkpoint(tmp_path):
    ck = small_checkpoint(tmp_path)
    bs = batches(3)
    a = mechprobe.load(ck)
    for x, y in bs[:2]:
        a.train_step(x, y, lr=3e-3)
    a.save(str(tmp_path / "mid.h5"))
    b = mechprobe.load(str(tmp_path / "mid.h5"))
    assert b.optimizer["step"] == 2
    la, lb = a.train_step(*bs[2]), b.train_step(*bs[2])
    assert la == lb
    for n in a.params():
        same(a.param(n), b.param(n))
    # Lua's mp.load continues the same optimizer
    h5write(tmp_path / "b.h5", x=bs[2][0], y=bs[2][1])
    out = lua(tmp_path, 'local m = mp.load(arg[1]); local d = mp.h5.open(arg[2]); '
                        'local l = m:train{task = {sample = function(self, B, T) return d:read_int("x"), '
                        'd:read_int("y") end}, steps = 1, progress = false}; '
                        'print(string.format("%.9g", l.loss[1]), l.step[1])', tmp_path / "mid.h5", tmp_path / "b.h5")
    assert out.split() == [f"{np.float32(la[0]):.9g}", "3"]


LUA_TRAIN = """
local m = mp.load(arg[1])
local d = mp.h5.open(arg[2])
local task = {i = 0}
function task:sample(B, T)
  self.i = self.i + 1
  return d:read_int("x" .. self.i), d:read_int("y" .. self.i)
end
local r = m:train{task = task, steps = 4, batch = 3, seq_len = 8, lr = 5e-3, warmup = 2, progress = false}
for i = 1, #r.loss do print(string.format("%d %.9g %.9g", r.step[i], r.loss[i], r.lr[i])) end
local f = mp.h5.open(arg[3], "w")
for _, n in ipairs(m:params()) do f:write(n, m:param(n)) end
f:close()
"""


class ListTask:
    def __init__(self, bs):
        self.bs, self.i, self.asked = bs, 0, []

    def sample(self, B, T):
        self.asked.append((B, T))
        self.i += 1
        return self.bs[self.i - 1]


def test_train_equals_lua(tmp_path):
    ck = small_checkpoint(tmp_path)
    bs = batches(4)
    h5write(tmp_path / "b.h5", **{f"x{i + 1}": x for i, (x, _) in enumerate(bs)},
            **{f"y{i + 1}": y for i, (_, y) in enumerate(bs)})
    out = lua(tmp_path, LUA_TRAIN, ck, tmp_path / "b.h5", tmp_path / "lw.h5").strip().splitlines()[-4:]
    m = mechprobe.load(ck)
    task = ListTask(bs)
    r = m.train(task, steps=4, batch=3, seq_len=8, lr=5e-3, warmup=2, progress=False)
    assert task.asked == [(3, 8)] * 4
    got = [f"{s} {np.float32(l):.9g} {np.float32(lr):.9g}" for s, l, lr in zip(r["step"], r["loss"], r["lr"])]
    assert got == out
    ref = h5read(tmp_path / "lw.h5")
    for n in m.params():
        same(m.param(n), ref[n])
    assert r["final_loss"] == r["loss"][-1] and r["tokens"][-1] == 4 * 3 * 8
    assert m.optimizer["step"] == 4


def test_train_progress_and_callbacks(tmp_path, capfd):
    m = mechprobe.Model(SMALL, seed=2)
    stream = mechprobe.TokenStream(np.random.default_rng(0).integers(0, 61, 500), seed=1)
    seen, wes = [], []
    r = m.train(stream, steps=6, batch=2, seq_len=8,
                on_step=lambda s, l: seen.append((s, l)) or wes.append(m.W_E) or s == 4,
                eval_every=2, eval_batches=1)
    err = capfd.readouterr().err
    assert "step" in err or "loss" in err  # the progress line, as m:train draws it
    assert [s for s, _ in seen] == [1, 2, 3, 4] and r["step"] == [1, 2, 3, 4]  # on_step's True stops the run
    assert [l for _, l in seen] == r["loss"]
    assert not np.array_equal(wes[0], wes[-1]) and np.array_equal(wes[-1], m.W_E)  # readable in on_step
    assert r["eval_step"] and all(np.isfinite(r["eval_loss"]))
    ckp = tmp_path / "ck.h5"
    m.train(stream, steps=2, batch=2, seq_len=8, progress=False, checkpoint=str(ckp))
    assert mechprobe.load(str(ckp)).optimizer["step"] == 6
    with pytest.raises(ZeroDivisionError):
        m.train(lambda B, T: 1 / 0, steps=2, progress=False)
    with pytest.raises(RuntimeError, match="boom"):
        m.train(stream, steps=3, progress=False, on_step=lambda s, l: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(TypeError, match="must return \\(tokens, targets\\)"):
        m.train(lambda B, T: None, steps=1, progress=False)
    with pytest.raises(ValueError, match="train: task.sample: tokens: token id 99"):
        m.train(lambda B, T: ([[99]], [[1]]), steps=1, progress=False)
    with pytest.raises(ValueError, match="resume=False"):
        m.train(stream, steps=1, lr=1.0, progress=False)
    r = m.train(stream, steps=1, lr=1e-4, resume=False, progress=False)
    assert m.optimizer["step"] == 1 and abs(m.optimizer["lr"] - 1e-4) < 1e-9


def test_train_step_errors():
    m = mechprobe.Model(SMALL, seed=2)
    x, y = batches(1)[0]
    with pytest.raises(ValueError, match="targets: shape \\[3, 7\\] differs from the tokens' \\[3, 8\\]"):
        m.train_step(x, y[:, :7])
    with pytest.raises(ValueError, match="train_step: targets: value 61"):
        m.train_step(x, np.full_like(y, 61))
    with pytest.raises(ValueError, match="train_step: tokens: token id -1"):
        m.train_step(-np.ones_like(x), y)
    with pytest.raises(ValueError, match="lr"):
        m.train_step(x, y, lr=-1.0)
    yy = y.copy()
    yy[:, :4] = -1  # not counted
    loss, _ = m.train_step(x, yy)
    assert np.isfinite(loss)
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.train_step(x, y)


@pytest.mark.parametrize("fmt,ext", [("h5", ".h5"), ("gguf", ".gguf"), ("hf", ""), ("llama2c", ".bin")])
def test_save_round_trips(tmp_path, fmt, ext):
    need_model()
    m = mechprobe.load(MODEL, TOK)
    toks = [[1, 2, 3, 50, 70]]
    ref = m.forward(toks)
    p = str(tmp_path / ("saved" + ext))
    m.save(p, format=fmt)
    m2 = mechprobe.load(p, TOK)
    same(m2.forward(toks), ref)
    sd, sd2 = m.state_dict(), m2.state_dict()
    assert list(sd) == list(sd2)
    for k in sd:
        same(sd[k], sd2[k])
    # the Lua binding reads what Python wrote
    out = lua(tmp_path, 'local m = mp.load(arg[1], {tokenizer = arg[2]}); local f = mp.h5.open(arg[3], "w"); '
                        'f:write("l", m:forward({{1, 2, 3, 50, 70}})); f:close()', p, TOK, tmp_path / "l.h5")
    same(h5read(tmp_path / "l.h5")["l"], ref)


def test_save_small_and_types(tmp_path):
    ck = small_checkpoint(tmp_path)
    m = mechprobe.load(ck)
    toks = [[1, 2, 3, 4]]
    gpt2 = mechprobe.Model(dict(SMALL, mlp="gelu_tanh", n_kv_head=4), seed=9, init_std=0.2)
    for fmt, p in (("hf", tmp_path / "hf2"), (None, tmp_path / "s.gguf")):
        gpt2.save(str(p), format=fmt)
        g = mechprobe.load(str(p))
        same(g.forward(toks), gpt2.forward(toks))
        for k, v in gpt2.state_dict().items():
            same(g.param(k), v)
    with pytest.raises(ValueError, match="save: .*hf: only .*Hugging Face"):
        m.save(str(tmp_path / "hf"), format="hf")
    gpt2.save(str(tmp_path / "q.gguf"), type="q8_0")
    q = mechprobe.load(str(tmp_path / "q.gguf"))
    np.testing.assert_allclose(q.forward(toks), gpt2.forward(toks), atol=0.3)  # 8-bit blocks of weights ~N(0, 0.2)
    assert not np.array_equal(q.forward(toks), gpt2.forward(toks))  # quantized
    with pytest.raises(ValueError, match="quantized.*dequantize"):
        q.param("blocks.0.attn.wq")
    q.dequantize()
    assert q.param("blocks.0.attn.wq").shape == (32, 32)
    with pytest.raises(ValueError, match="s.bin"):  # LayerNorm, GELU, learned positions: not llama2.c
        m.save(str(tmp_path / "s.bin"))
    assert not os.path.exists(tmp_path / "s.bin")
    with pytest.raises(ValueError, match="format must be"):
        m.save(str(tmp_path / "x"), format="onnx")
    with pytest.raises(ValueError, match="type must be"):
        m.save(str(tmp_path / "x.gguf"), type="q4")
    with pytest.raises(ValueError, match="type= applies to GGUF"):
        m.save(str(tmp_path / "x.h5"), type="f16")
    with pytest.raises(OSError, match="no/dir"):
        m.save(str(tmp_path / "no" / "dir" / "x.h5"))
