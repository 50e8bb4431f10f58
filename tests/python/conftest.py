"""Shared pytest fixtures of the Python module's tests (pytest loads this file
for every test in tests/python/)."""
import os

import numpy as np
import pytest

import mechprobe
from hooks_support import AIDREAMS, AIDREAMS_TOK, RANDOM_TOKENS, LuaRef, aidreams_tokens, random_checkpoint


# setup: (model, tokens, the Lua binding's results on them) for the shared
# aidreams260K model (skipped when absent) and a small random checkpoint
@pytest.fixture(scope="module", params=["aidreams", "random"])
def setup(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    if request.param == "aidreams":
        if not os.path.exists(AIDREAMS):
            pytest.skip(f"{AIDREAMS} absent")
        m = mechprobe.load(AIDREAMS, tokenizer=AIDREAMS_TOK)
        path, toks = AIDREAMS, aidreams_tokens(m)
    else:
        path = random_checkpoint(d)
        m = mechprobe.load(path)
        toks = np.array(RANDOM_TOKENS, dtype=np.int32)
    return m, toks, LuaRef(d, path, toks)
