"""mechprobe.analyze on numpy arrays against the Lua binding's mp.analyze on
the same data (bit for bit: float32 results equal, doubles printed with 17
digits equal), closed forms, real activations of the shared model, and the
errors."""
import numpy as np
import pytest

import mechprobe
from mechprobe import analyze
from extra_util import MODEL, TOK, h5read, h5write, lua, need_model, same

LUA = """
local d = mp.h5.open(arg[1])
local f = mp.h5.open(arg[2], "w")
local A = mp.analyze
local X, Y = d:read("X"), d:read("Y")
local function num(k, v) print(k .. " " .. string.format("%.17g", v)) end
local p = A.pca(X, 5)
for _, k in ipairs{"components", "explained", "ratio", "mean", "proj"} do f:write("pca." .. k, p[k]) end
num("pca.total_var", p.total_var); print("pca.method " .. p.method)
num("stable_rank", A.stable_rank(X)); num("sigma1_share", A.sigma1_share(X))
local s = A.spectrum(Y)
for _, k in ipairs{"fro2", "sigma1", "stable_rank", "sigma1_share"} do num("spectrum." .. k, s[k]) end
local sep = A.separation(X, Y, {ridge = 1e-3})
for _, k in ipairs{"cos", "centroid_dist", "spread", "dist_over_spread", "fisher_j", "fisher_acc", "ridge"} do
  num("separation." .. k, sep[k]) end
local P = d:read("P")
local sk = A.sinks(P, {eps = 0.2, bins = 3})
for _, k in ipairs{"alpha", "entropy", "alpha0", "first_by_pos", "bin_start", "bin_end"} do f:write("sinks." .. k, sk[k]) end
num("sinks.sink_rate", sk.sink_rate); num("sinks.sink_heads", sk.sink_heads); num("sinks.pairs", sk.pairs)
f:write("entropy", A.entropy(P))
local K = d:read("K")
num("key_norm_ratio", A.key_norm_ratio(K))
local mx, am = A.max_qk(d:read("Q"), K, {causal = true})
f:write("max_qk", mx)
local t = {}
for i = 1, #am do t[i] = am[i] - 1 end
print("max_qk.argmax " .. table.concat(t, ","))
local H = d:read("H")
local ms = A.massive(H, {abs = 5, rel = 3, max_hits = 4})
f:write("massive.ratio", ms.ratio); f:write("massive.median", ms.median)
num("massive.n_hits_total", ms.n_hits_total)
for i, h in ipairs(ms.hits) do
  print(string.format("massive.hit%d %d,%d,%d,%.9g", i, h.layer - 1, h.pos - 1, h.channel - 1, h.value)) end
local v = d:read("v")
for _, st in ipairs{"mean", "median"} do
  local b = A.bootstrap(v, {n = 300, level = 0.9, seed = 7, stat = st})
  for _, k in ipairs{"estimate", "lo", "hi", "se"} do num("bootstrap." .. st .. "." .. k, b[k]) end
end
local b = A.bootstrap(v, {n = 50, seed = 3, stat = function(x) return x[1] * 2 end})
num("bootstrap.fn.estimate", b.estimate); num("bootstrap.fn.se", b.se)
for _, kind in ipairs{"linear", "logistic"} do
  local pr = A.probe(X, d:read("y"), {kind = kind, ridge = 0.5})
  f:write("probe." .. kind .. ".w", pr.w); f:write("probe." .. kind .. ".pred", pr:predict(Y))
  for _, k in ipairs{"b", "loss", "train_acc"} do num("probe." .. kind .. "." .. k, pr[k]) end
  num("probe." .. kind .. ".acc", pr:accuracy(Y, d:read("yY")))
  print("probe." .. kind .. ".iterations " .. pr.iterations)
end
f:close()
"""


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("an")
    rng = np.random.default_rng(11)
    T = 7
    P = rng.random((2, 3, T, T)).astype(np.float32)
    P = np.tril(P)
    P /= P.sum(-1, keepdims=True)
    P[0, 0, :, 0] += 2.0  # a sink head
    P[0, 0] /= P[0, 0].sum(-1, keepdims=True)
    data = dict(X=rng.standard_normal((40, 6)).astype(np.float32),
                Y=(rng.standard_normal((30, 6)) + 0.7).astype(np.float32), P=P.astype(np.float32),
                K=rng.standard_normal((T, 5)).astype(np.float32), Q=rng.standard_normal((T, 5)).astype(np.float32),
                H=(rng.standard_normal((2, 5, 8)) * np.array([1] * 7 + [40])).astype(np.float32),
                v=rng.exponential(size=25).astype(np.float32))
    data["y"] = (data["X"][:, 0] + 0.3 * rng.standard_normal(40) > 0).astype(np.float32)
    data["yY"] = (data["Y"][:, 0] > 0.7).astype(np.float32)
    h5write(tmp / "d.h5", **data)
    out = lua(tmp, LUA, tmp / "d.h5", tmp / "r.h5")
    nums = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        nums[k] = v
    return data, nums, h5read(tmp / "r.h5")


def f17(x):
    return f"{x:.17g}"


def f32(a):
    return np.asarray(a).astype(np.float32)


def test_geometry_equals_lua(ref):
    d, n, r = ref
    p = analyze.pca(d["X"], 5)
    for k in ("components", "explained", "ratio", "mean", "proj"):
        same(f32(p[k]), r["pca." + k])
    assert f17(p["total_var"]) == n["pca.total_var"] and p["method"] == n["pca.method"]
    assert f17(analyze.stable_rank(d["X"])) == n["stable_rank"]
    assert f17(analyze.sigma1_share(d["X"])) == n["sigma1_share"]
    s = analyze.spectrum(d["Y"])
    for k in s:
        assert f17(s[k]) == n["spectrum." + k], k
    sep = analyze.separation(d["X"], d["Y"], ridge=1e-3)
    for k in sep:
        assert f17(sep[k]) == n["separation." + k], k


def test_sinks_and_attention_equal_lua(ref):
    d, n, r = ref
    s = analyze.sinks(d["P"], eps=0.2, bins=3)
    for k in ("alpha", "entropy", "alpha0", "first_by_pos"):
        same(f32(s[k]), r["sinks." + k])
    same(f32(s["bin_start"] + 1), r["sinks.bin_start"])  # Lua: 1-based, inclusive
    same(f32(s["bin_end"]), r["sinks.bin_end"])
    assert f17(s["sink_rate"]) == n["sinks.sink_rate"] and f"{s['sink_heads']}" == n["sinks.sink_heads"]
    assert s["sink_heads"] >= 1 and s["pairs"] == 6
    same(f32(analyze.entropy(d["P"])), r["entropy"])
    assert f17(analyze.key_norm_ratio(d["K"])) == n["key_norm_ratio"]
    mx, am = analyze.max_qk(d["Q"], d["K"])
    same(mx, r["max_qk"])
    assert ",".join(map(str, am)) == n["max_qk.argmax"]
    m = analyze.massive(d["H"], abs=5, rel=3, max_hits=4)
    same(f32(m["ratio"]), r["massive.ratio"])
    same(f32(m["median"]), r["massive.median"])
    assert f"{m['n_hits_total']}" == n["massive.n_hits_total"] and len(m["hits"]) == 4
    for i, h in enumerate(m["hits"]):
        assert f"{h['layer']},{h['pos']},{h['channel']},{np.float32(h['value']):.9g}" == n[f"massive.hit{i + 1}"]
        assert h["channel"] == 7


def test_bootstrap_and_probe_equal_lua(ref):
    d, n, r = ref
    for st in ("mean", "median"):
        b = analyze.bootstrap(d["v"], n=300, level=0.9, seed=7, stat=st)
        for k in ("estimate", "lo", "hi", "se"):
            assert f17(b[k]) == n[f"bootstrap.{st}.{k}"], (st, k)
    b = analyze.bootstrap(d["v"], n=50, seed=3, stat=lambda x: x[0] * 2)
    assert f17(b["estimate"]) == n["bootstrap.fn.estimate"] and f17(b["se"]) == n["bootstrap.fn.se"]
    for kind in ("linear", "logistic"):
        pr = analyze.probe(d["X"], d["y"], kind=kind, ridge=0.5)
        same(f32(pr.w), r[f"probe.{kind}.w"])
        same(f32(pr.predict(d["Y"])), r[f"probe.{kind}.pred"])
        for k in ("b", "loss", "train_acc"):
            assert f17(getattr(pr, k)) == n[f"probe.{kind}.{k}"], (kind, k)
        assert f17(pr.accuracy(d["Y"], d["yY"])) == n[f"probe.{kind}.acc"]
        assert f"{pr.iterations}" == n[f"probe.{kind}.iterations"]
    assert analyze.probe(d["X"], d["y"], kind="logistic", ridge=0.5).rank is None


def test_closed_forms():
    # points on a line: one component explains everything
    t = np.linspace(-1, 1, 50, dtype=np.float32)
    X = np.stack([t, 2 * t, -t], 1)
    p = analyze.pca(X, 2)
    assert abs(p["ratio"][0] - 1) < 1e-6 and abs(p["ratio"][1]) < 1e-6
    np.testing.assert_allclose(np.abs(p["components"][0]), np.array([1, 2, 1]) / np.sqrt(6), atol=1e-6)
    # orthogonal equal-norm rows: stable rank = rank
    assert abs(analyze.stable_rank(np.eye(4, dtype=np.float32) * 3) - 4) < 1e-9
    assert abs(analyze.sigma1_share(np.eye(4, dtype=np.float32)) - 0.25) < 1e-9
    # a uniform causal pattern: entropy of row q is log(q + 1); every key's alpha is the mean of 1/(q+1)
    T = 6
    U = np.tril(np.ones((T, T), np.float32)) / np.arange(1, T + 1, dtype=np.float32)[:, None]
    np.testing.assert_allclose(analyze.entropy(U[None]), np.log(np.arange(1, T + 1))[None], atol=1e-6)
    s = analyze.sinks(U[None, None])
    np.testing.assert_allclose(s["alpha"][0, 0, 0], np.mean(1 / np.arange(1, T + 1)), atol=1e-9)
    b = analyze.bootstrap(np.full(10, 3.0), n=20)
    assert b["estimate"] == 3.0 and b["lo"] == b["hi"] == 3.0 and b["se"] == 0.0
    # a linear probe recovers exact weights
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((50, 3)).astype(np.float32)
    y = Z.astype(np.float64) @ np.array([1.5, -2.0, 0.25]) + 0.5
    pr = analyze.probe(Z, y)
    np.testing.assert_allclose(pr.w, [1.5, -2.0, 0.25], atol=1e-5)
    assert abs(pr.b - 0.5) < 1e-5 and pr.r2 > 0.999999


def test_on_captured_activations(tmp_path):
    need_model()
    m = mechprobe.load(MODEL, TOK)
    m.capture("Once upon a time there was a little girl", str(tmp_path / "c.h5"),
              hooks="blocks.*.attn.hook_pattern,blocks.*.hook_resid_post")
    a = h5read(tmp_path / "c.h5")
    pat = np.stack([a[f"acts/blocks.{l}.attn.hook_pattern"][0] for l in range(4)])  # [L, H, T, T]
    s = analyze.sinks(pat)
    assert s["alpha"].shape == pat.shape[:-1] and 0 <= s["sink_rate"] <= 1
    h = np.stack([a[f"acts/blocks.{l}.hook_resid_post"][0] for l in range(4)])
    assert analyze.massive(h)["ratio"].shape == (4, h.shape[1])
    assert 1 <= analyze.stable_rank(h[-1]) <= min(h.shape[1:])


def test_errors():
    with pytest.raises(ValueError, match="analyze.pca: X: expected points \\[n, d\\]"):
        analyze.pca(np.zeros(5))
    with pytest.raises(ValueError, match="analyze.pca: k must be an integer in 1..3"):
        analyze.pca(np.zeros((4, 3)), 7)
    with pytest.raises(TypeError, match="analyze.stable_rank: X: expected an array of numbers"):
        analyze.stable_rank("abc")
    with pytest.raises(ValueError, match="analyze.separation: the clouds have dimensions 3 and 4"):
        analyze.separation(np.ones((5, 3)), np.ones((5, 4)))
    with pytest.raises(ValueError, match="analyze.sinks: pattern: expected an attention pattern"):
        analyze.sinks(np.ones((2, 3, 4)))
    bad = np.tril(np.ones((3, 3), np.float32))
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="analyze.sinks"):
        analyze.sinks(bad)
    with pytest.raises(ValueError, match="analyze.max_qk: q is \\[4, 2\\] but k is \\[3, 2\\]"):
        analyze.max_qk(np.ones((4, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="analyze.massive: h: expected hidden states"):
        analyze.massive(np.ones(4))
    with pytest.raises(ValueError, match="stat 'mode' unknown"):
        analyze.bootstrap([1, 2, 3], stat="mode")
    with pytest.raises(ZeroDivisionError):
        analyze.bootstrap([1, 2, 3], stat=lambda x: 1 / 0)
    with pytest.raises(ValueError, match="analyze.probe: y has 2 labels for 3 rows"):
        analyze.probe(np.ones((3, 2)), [1, 0])
    with pytest.raises(ValueError, match="kind must be"):
        analyze.probe(np.ones((3, 2)), [1, 0, 1], kind="svm")
    with pytest.raises(ValueError, match="analyze.probe"):
        analyze.probe(np.ones((3, 2)), [1, 1, 1], kind="logistic")  # one class
