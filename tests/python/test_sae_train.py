"""SAE training and metrics from Python (python/mpy_sae_train.c):
mechprobe.train_sae from numpy rows, capture files and a live model, and
sae.evaluate, equal bit for bit to the Lua binding's mp.sae.train /
sae:evaluate on the same model, data and options (sae_train_ref.lua through
the mechprobe CLI: the same C core, runtime/sae_train.c), the three sources
training the same SAE on the same rows, checkpoints, and the refusals."""
import os

import numpy as np
import pytest

import mechprobe
from hooks_support import HERE, run_lua

HOOK = "blocks.0.hook_resid_post"
TOKS = np.array([[(b * 7 + t * 3) % 20 for t in range(1, 11)] for b in range(1, 7)], dtype=np.int32)
TOPK = dict(architecture="topk", d_sae=32, k=4, batch_size=20, steps=12, lr=1e-3, seed=3, shuffle_buffer=40)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    import h5py
    d = str(tmp_path_factory.mktemp("sae_train"))
    run_lua(os.path.join(HERE, "sae_train_ref.lua"), d)
    vals = {}
    with open(os.path.join(d, "ref.txt")) as f:
        for line in f:
            k, v = line.split()
            vals[k] = float(v)
    with h5py.File(os.path.join(d, "acts.h5"), "r") as f:
        rows = f["acts/" + HOOK][()].reshape(60, 16)
    m = mechprobe.load(os.path.join(d, "model.h5"))
    yield d, vals, rows, m
    m.close()


def same_sae(a, b):
    for w in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert np.array_equal(getattr(a, w), getattr(b, w)), w


def same_results(name, res, vals):
    n = 0
    for k, v in res.items():
        if name + "." + k in vals:
            assert v == vals[name + "." + k], (name, k, v, vals[name + "." + k])
            n += 1
    assert n >= 5, (name, res)


def test_sources_match_lua(ref):
    d, vals, rows, m = ref
    steps = []
    live, r_live = mechprobe.train_sae(model=m, hook=HOOK, tokens=TOKS, seqs_per_forward=1, checkpoint_every=5,
                                       on_checkpoint=lambda s, step, tokens: steps.append((step, tokens)), **TOPK)
    same_sae(live, mechprobe.SAE.load(os.path.join(d, "sae_live")))
    same_results("live", r_live, vals)
    assert steps == [(5, 100), (10, 200), (12, 240)]
    assert live.cfg["hook_name"] == HOOK and live.cfg["hook_layer"] == 0 and live.cfg["k"] == 4
    assert set(r_live) >= {"auxiliary_reconstruction_loss", "tokens_per_second", "steady_tokens_per_second"}
    ds, r_ds = mechprobe.train_sae(dataset=[os.path.join(d, "acts.h5")], hook=HOOK, chunk_rows=7, **TOPK)
    same_sae(ds, mechprobe.SAE.load(os.path.join(d, "sae_dataset")))
    same_results("dataset", r_ds, vals)
    # the same rows in memory train the same SAE as the capture file (the Lua test's identity)
    mem, r_mem = mechprobe.train_sae(data=rows, **TOPK)
    same_sae(mem, ds)
    assert r_mem["mse_loss"] == r_ds["mse_loss"]


def test_standard_options_continue_and_evaluate_match_lua(ref, tmp_path):
    d, vals, rows, m = ref
    std, r = mechprobe.train_sae(architecture="standard", d_sae=24, data=rows, batch_size=30, steps=9,
                                 l1_coefficient=0.5, l1_warm_up_steps=3, lr=2e-3, lr_scheduler="cosineannealing",
                                 lr_warm_up_steps=2, lr_decay_steps=2, seed=9, shuffle_buffer=50,
                                 checkpoint_every=4, checkpoint_path=str(tmp_path / "ck"))
    same_sae(std, mechprobe.SAE.load(os.path.join(d, "sae_data_std")))
    same_results("data_std", r, vals)
    assert "l1_loss" in r and "auxiliary_reconstruction_loss" not in r
    assert sorted(os.listdir(tmp_path / "ck")) == ["120", "240", "270"]  # SAELens names checkpoints by tokens
    same_sae(mechprobe.SAE.load(str(tmp_path / "ck" / "270")), std)
    same, r2 = mechprobe.train_sae(sae=std, data=rows, steps=2, batch_size=20)
    assert same is std
    same_sae(std, mechprobe.SAE.load(os.path.join(d, "sae_continued")))
    same_results("continued", r2, vals)
    live = mechprobe.SAE.load(os.path.join(d, "sae_live"))
    same_results("eval_model", live.evaluate(model=m, tokens=TOKS), vals)
    met = live.evaluate(data=rows)
    same_results("eval_data", met, vals)
    assert "ce_loss_recovered" not in met
    # closed forms on the metrics: l0 and mse of the rows by hand
    acts = live.encode(rows)
    assert met["l0"] == pytest.approx((acts > 0).sum(1).mean(), rel=1e-12)
    rec = live.forward(rows).astype(np.float64)
    assert met["mse"] == pytest.approx(((rows - rec) ** 2).mean(), rel=1e-5)


def test_refusals(ref):
    d, vals, rows, m = ref
    with pytest.raises(ValueError, match="exactly one data source"):
        mechprobe.train_sae(data=rows, model=m, **TOPK)
    with pytest.raises(ValueError, match="exactly one of steps"):
        mechprobe.train_sae(data=rows, architecture="standard", d_sae=8)
    with pytest.raises(ValueError, match="needs hook"):
        mechprobe.train_sae(dataset="x.h5", **TOPK)
    with pytest.raises(OSError, match="/nonexistent/x.h5"):
        mechprobe.train_sae(dataset="/nonexistent/x.h5", hook=HOOK, **TOPK)
    with pytest.raises(ValueError, match="architecture"):
        mechprobe.train_sae(data=rows, architecture="jumprelu", d_sae=8, steps=1)
    with pytest.raises(ValueError, match="lr"):
        mechprobe.train_sae(data=rows, **{**TOPK, "lr": -1.0})
    with pytest.raises(ValueError, match="blocks.7"):
        mechprobe.train_sae(model=m, hook="blocks.7.hook_resid_post", tokens=TOKS, **TOPK)
    with pytest.raises(ValueError, match="for a new SAE"):
        mechprobe.train_sae(sae=mechprobe.SAE(d_in=16, d_sae=8), d_sae=8, data=rows, steps=1)
    with pytest.raises(ValueError, match="differs"):
        mechprobe.train_sae(sae=mechprobe.SAE(d_in=5, d_sae=8), data=rows, steps=1)
    with pytest.raises(TypeError):
        mechprobe.train_sae(rows)

    def boom(s, step, tokens):
        raise KeyError("boom")
    with pytest.raises(KeyError, match="boom"):
        mechprobe.train_sae(data=rows, checkpoint_every=2, on_checkpoint=boom, **TOPK)

    def close_it(s, step, tokens):
        s.close()
    with pytest.raises(RuntimeError, match="SAE.close"):
        mechprobe.train_sae(data=rows, checkpoint_every=2, on_checkpoint=close_it, **TOPK)
    s = mechprobe.SAE(d_in=16, d_sae=8)
    with pytest.raises(ValueError, match="d_in = 16"):
        s.evaluate(data=np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="model= and tokens="):
        s.evaluate()
