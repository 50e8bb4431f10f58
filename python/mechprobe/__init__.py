"""mechprobe in Python: the C core of the mechprobe toolkit in-process.

    import mechprobe
    m = mechprobe.load("stories15M.bin")          # llama2.c, GGUF, HF folder, checkpoint
    logits, cache = m.run_with_cache("Once upon a time")
    cache["blocks.0.attn.hook_pattern"].shape      # numpy arrays

The Model's methods are implemented in C (mechprobe._core) over the same
functions the Lua bindings call; this package re-exports them.
"""
from ._core import Error, Model, config_fields, load  # noqa: F401

__all__ = ["Error", "Model", "config_fields", "load"]

# hooks, the activation cache, gradients (mpy_hooks.c)
from .cache import ActivationCache  # noqa: E402,F401
from .hooks import HookPoint, attribution_patch  # noqa: E402,F401

__all__ += ["ActivationCache", "HookPoint", "attribution_patch"]

# interventions, capture, weights, saving, training, analyses (mpy_extra.c, extra.py, analyze.py)
from ._core import capture, patch, scale, steer  # noqa: E402,F401
from .extra import Intervention, TokenStream, ablate, load  # noqa: E402,F401
from . import analyze  # noqa: E402,F401

__all__ += ["Intervention", "TokenStream", "ablate", "analyze", "capture", "patch", "scale", "steer"]

# sparse autoencoders: SAELens folders, encode / decode / forward (mpy_sae.c)
from ._core import SAE  # noqa: E402,F401

__all__ += ["SAE"]

# SAEs spliced into a model (m.add_sae, run_with_saes: mpy_sae_splice.c), training and metrics (mpy_sae_train.c)
from ._core import train_sae  # noqa: E402,F401

__all__ += ["train_sae"]
