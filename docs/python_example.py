# python_example.py — mechprobe from Python, notebook style: each "# %%" is a
# cell (Jupyter, VS Code and Spyder run them one by one; `python3
# docs/python_example.py` runs them all). It needs the model `./setup.sh` trains
# (out/quickstart/model.h5) and Debian's python3-matplotlib, and writes three
# figures under out/python_example/: a logit lens, activation patching of the
# residual stream over every block and position, and attribution patching's
# estimate of the same beside it.

# %% Load the model with the final norm's weight folded into the unembedding
import os

import matplotlib

matplotlib.use("Agg")  # files only; drop this line in a notebook to see the figures inline
import matplotlib.pyplot as plt
import numpy as np

import mechprobe

OUT = "out/python_example"
os.makedirs(OUT, exist_ok=True)
m = mechprobe.load("out/quickstart/model.h5", fold_ln=True)  # TransformerLens's fold_ln: W_U absorbs ln_f's weight
cfg = m.config
print(m, cfg["n_layer"], "layers,", cfg["n_head"], "heads")

# %% Logit lens: the residual stream entering each block, read out through the unembedding
prompt = "The cat sat on the mat"
tokens = m.to_tokens(prompt)
labels_tok = m.to_str_tokens(tokens)
logits, cache = m.run_with_cache(tokens)
resid, labels = cache.accumulated_resid(apply_ln=True, return_labels=True)  # [C, 1, T, D], normalized
lens = resid[:, 0] @ m.W_U  # [C, T, V]: what each layer would predict
final = logits[0].argmax(-1)  # [T]: the model's own predictions
agree = (lens.argmax(-1) == final[None, :]).astype(float)  # [C, T]
fig, ax = plt.subplots(figsize=(8, 3.2))
im = ax.imshow(agree, cmap="Greens", vmin=0, vmax=1, aspect="auto")
ax.set_yticks(range(len(labels)), labels)
ax.set_xticks(range(len(labels_tok)), [repr(s)[1:-1] for s in labels_tok], rotation=90)
ax.set_title("logit lens: layer's top token = the model's final top token")
fig.colorbar(im, ax=ax)
fig.tight_layout()
fig.savefig(f"{OUT}/logit_lens.png", dpi=150)
print("logit lens: agreement with the final prediction by layer", agree.mean(1).round(2))

# %% Activation patching: corrupt one word, restore the clean residual stream at one block and position
clean = m.to_tokens("The cat sat on the")
corrupt = m.to_tokens("The dog sat on the")  # the same length in tokens
assert clean.shape == corrupt.shape
clean_logits, clean_cache = m.run_with_cache(clean, names="blocks.*.hook_resid_pre")
corrupt_logits = m.forward(corrupt)
a = int(clean_logits[0, -1].argmax())  # the clean run's next token
order = np.argsort(-corrupt_logits[0, -1])
b = int(order[0] if order[0] != a else order[1])  # the corrupt run's best other token


def metric(lg):  # logit difference at the last position
    return float(lg[0, -1, a] - lg[0, -1, b])


m_clean, m_corrupt = metric(clean_logits), metric(corrupt_logits)
L, T = cfg["n_layer"], clean.shape[1]
patched = np.zeros((L, T))
for layer in range(L):
    name = f"blocks.{layer}.hook_resid_pre"
    for pos in range(T):
        def restore(act, hook, pos=pos):  # TransformerLens's fn(act, hook): edit in place
            act[:, pos] = clean_cache[hook.name][:, pos]
        patched[layer, pos] = metric(m.run_with_hooks(corrupt, fwd_hooks=[(name, restore)]))
recovered = (patched - m_corrupt) / (m_clean - m_corrupt)  # 1: the clean behaviour is back, 0: still corrupt
print(f"logit diff clean {m_clean:.3f}, corrupt {m_corrupt:.3f}")

# %% Attribution patching: the gradient's linear estimate of every patch above, from two forwards and one backward
attr, values = mechprobe.attribution_patch(m, clean, corrupt, "blocks.*.hook_resid_pre",
                                           {"logit_diff": (a, b)}, per="position")
estimate = np.stack([attr[f"blocks.{l}.hook_resid_pre"] for l in range(L)])  # [L, T] (per="position": [T] each)
estimate = estimate / (m_clean - m_corrupt)
print("metric values", values)
print("correlation of the estimate with the patching:",
      round(float(np.corrcoef(estimate.ravel(), recovered.ravel())[0, 1]), 3))

# %% Figures: the patching and its estimate side by side
xt = [repr(s)[1:-1] for s in m.to_str_tokens(clean)]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
for ax, data, title in ((axes[0], recovered, "activation patching (resid_pre)"),
                        (axes[1], estimate, "attribution patching estimate")):
    lim = max(1e-6, float(np.abs(data).max()))
    im = ax.imshow(data, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_title(title)
    ax.set_xticks(range(T), xt, rotation=90)
    ax.set_yticks(range(L))
    ax.set_xlabel("position")
    fig.colorbar(im, ax=ax, label="fraction of the logit difference")
axes[0].set_ylabel("block")
fig.tight_layout()
fig.savefig(f"{OUT}/activation_patching.png", dpi=150)
fig2, ax = plt.subplots(figsize=(4, 4))
ax.scatter(recovered.ravel(), estimate.ravel(), s=12)
ax.set_xlabel("activation patching")
ax.set_ylabel("attribution patching")
ax.set_title("estimate vs patching, every (block, position)")
fig2.tight_layout()
fig2.savefig(f"{OUT}/attribution_patching.png", dpi=150)
print("figures in", OUT)
