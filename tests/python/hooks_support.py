"""Shared by tests/python/test_{hooks,cache,grad}.py: the models the tests use
and the Lua binding's results on them (hooks_ref.lua run through the mechprobe
CLI), which the Python module must reproduce bit for bit.

Environment (tests/python.cmake sets it): MP_SHARED_DIR (../shared), MP_CLI
(the mechprobe binary); a test whose model or CLI is absent is skipped."""
import os
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("MP_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
CLI = os.environ.get("MP_CLI", "")
AIDREAMS = os.path.join(SHARED, "models", "aidreams260K.bin")
AIDREAMS_TOK = os.path.join(SHARED, "models", "aidreams260K.tok512.bin")

# a random model of the other kinds (LayerNorm, learned positions, GELU), made by
# the Lua binding (mp.model.new, m:save) as a checkpoint both bindings load
RANDOM_LUA = """
local m = mp.model.new{d_model = 32, n_layer = 3, n_head = 4, vocab = 40, ctx = 16, seed = 7, init_std = 0.2,
                       norm = "layer", pos = "learned", mlp = "gelu"}
m:save(arg[1])
"""

RANDOM_TOKENS = [[1, 5, 9, 2, 33, 7, 12, 30, 4], [3, 3, 17, 8, 21, 39, 0, 6, 11]]


def need_cli():
    if not CLI or not os.path.exists(CLI):
        pytest.skip("the mechprobe CLI (MP_CLI) is absent")


def run_lua(script_path, *args):
    need_cli()
    r = subprocess.run([CLI, script_path, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"mechprobe {os.path.basename(script_path)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def random_checkpoint(tmp_dir):
    path = os.path.join(tmp_dir, "random.h5")
    if not os.path.exists(path):
        script = os.path.join(tmp_dir, "make_random.lua")
        with open(script, "w") as f:
            f.write(RANDOM_LUA)
        run_lua(script, path)
    return path


def aidreams_tokens(m):
    """Two rows of 10 tokens of a story (the model's tokenizer)."""
    ids = m.to_tokens("Once upon a time, there was a little girl named Lily. She loved to play")[0]
    assert ids.shape[0] >= 12
    return np.stack([ids[:10], ids[2:12]]).astype(np.int32)


class LuaRef:
    """hooks_ref.lua's outputs: arrays (h5py) and values."""

    def __init__(self, tmp_dir, model_path, tokens):
        import h5py
        tokfile = os.path.join(tmp_dir, "tokens.txt")
        with open(tokfile, "w") as f:
            for row in tokens:
                f.write(" ".join(str(int(t)) for t in row) + "\n")
        self.h5 = os.path.join(tmp_dir, "ref.h5")
        txt = os.path.join(tmp_dir, "ref.txt")
        run_lua(os.path.join(HERE, "hooks_ref.lua"), model_path, tokfile, self.h5, txt)
        self.arrays = {}
        with h5py.File(self.h5, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    self.arrays[name] = obj[()]
            f.visititems(visit)
        self.values = {}
        with open(txt) as f:
            for line in f:
                k, v = line.split()
                self.values[k] = float(v)

    def group(self, prefix):
        n = len(prefix) + 1
        return {k[n:]: v for k, v in self.arrays.items() if k.startswith(prefix + "/")}


def same(a, b, what):
    """Bit-identical float32 arrays (same shape), with a message naming what."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    assert a.dtype == np.float32 and b.dtype == np.float32, f"{what}: dtypes {a.dtype}, {b.dtype}"
    d = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
    assert d.size == 0, f"{what}: {d.size} of {a.size} values differ (first at {d[0]}: {a.flat[d[0]]!r} vs {b.flat[d[0]]!r})"
