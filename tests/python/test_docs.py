"""The Python examples of the docs run as written: every ```python block of
README.md and of docs/python.md that uses the module (in order, each file in one namespace), and
docs/python_example.py as a script. They run in a scratch folder whose
out/quickstart/model.h5 is a small byte-level model standing in for the one
`./setup.sh` trains (the same shape of file: a checkpoint with the bytes
tokenizer), so the test needs no training run; the figures the example writes are
checked to be PNG files."""
import os
import re
import runpy

import mechprobe

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def stand_in(tmp_path, monkeypatch):
    (tmp_path / "out" / "quickstart").mkdir(parents=True)
    cfg = {"d_model": 32, "n_layer": 4, "n_head": 8, "n_kv_head": 4, "vocab": 260, "ctx": 128}
    with mechprobe.Model(cfg, seed=1, init_std=0.1, tokenizer="bytes") as m:
        m.save(str(tmp_path / "out" / "quickstart" / "model.h5"))
    monkeypatch.chdir(tmp_path)


def run_blocks(path, min_blocks, module_only=False):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    blocks = re.findall(r"\n```python\n(.*?)```", "\n" + text, re.S)
    if module_only:  # README.md also shows h5py reading a capture's file
        blocks = [b for b in blocks if "import mechprobe" in b]
    assert len(blocks) >= min_blocks, f"{path}: {len(blocks)} python examples, expected at least {min_blocks}"
    ns = {}
    for i, b in enumerate(blocks):
        exec(compile(b, f"{path} example {i + 1}", "exec"), ns)


def test_readme(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch)
    run_blocks("README.md", 1, module_only=True)


def test_python_md(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch)
    run_blocks("docs/python.md", 12)


def test_notebook_example(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch)
    runpy.run_path(os.path.join(ROOT, "docs", "python_example.py"), run_name="__main__")
    for name in ("logit_lens.png", "activation_patching.png", "attribution_patching.png"):
        p = tmp_path / "out" / "python_example" / name
        assert p.exists(), f"{p} not written"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{p} is not a PNG file"
