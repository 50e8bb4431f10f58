"""Shared helpers of the tests/python/test_extra_*.py files: where the shared
models and the mechprobe binary are, running a Lua script through the binary
(the Lua binding is the reference the Python module is compared with), and a
small random model saved to a checkpoint that both bindings load."""
import os
import subprocess

import numpy as np
import pytest

SHARED = os.environ.get("MP_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
MODEL = os.path.join(SHARED, "models", "aidreams260K.bin")
TOK = os.path.join(SHARED, "models", "aidreams260K.tok512.bin")
# the mechprobe binary of the same build as the module (ctest sets MP_CLI): a binary of
# another build (Release beside Debug) differs in the last bits
BIN = (os.environ.get("MP_CLI") or os.environ.get("MECHPROBE_BIN")
       or os.path.join(os.path.dirname(__file__), "..", "..", "build", "mechprobe"))

# a small random model: LayerNorm, GELU, biases and learned positions, so that
# every TL weight and every weight-processing step exists
SMALL = {"d_model": 32, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "vocab": 61, "ctx": 16, "norm": "layer",
         "mlp": "gelu", "pos": "learned", "qkv_bias": True, "linear_bias": True, "tied": False}


def need_model():
    if not (os.path.exists(MODEL) and os.path.exists(TOK)):
        pytest.skip(f"{MODEL} (the shared model) is absent")


def need_bin():
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"{BIN} (the mechprobe binary, the Lua reference) is absent")


def lua(tmp_path, script, *args):
    """Runs the Lua script with the mechprobe binary (args as arg[1..]); returns stdout."""
    need_bin()
    f = tmp_path / "ref.lua"
    f.write_text("local mp = require('mechprobe')\n" + script)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the binary links ASan itself under MP_SANITIZE
    r = subprocess.run([BIN, str(f), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"Lua reference failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def h5read(path):
    """Every dataset of an HDF5 file as {path: numpy array}."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return out


def h5write(path, **arrays):
    import h5py
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v)


def small_checkpoint(tmp_path, seed=7):
    """A random SMALL model saved as a checkpoint; returns its path."""
    import mechprobe
    p = tmp_path / "small.h5"
    with mechprobe.Model(SMALL, seed=seed, init_std=0.2) as m:
        m.save(str(p))
    return str(p)


def same(a, b):
    """Bit-identical float arrays (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype or (a.dtype.kind == b.dtype.kind == "f"), (a.dtype, b.dtype)
    assert np.array_equal(a, b, equal_nan=True), f"max |diff| {np.nanmax(np.abs(a.astype(np.float64) - b)):.3g}"
