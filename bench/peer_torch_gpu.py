#!/usr/bin/env python3
"""peer_torch_gpu.py — the PyTorch eager GPU peer of bench_gpu (bench/gpu_check.sh):
the SAME llama2.c model and tokens, a straightforward Llama prefill (bench/peer_torch.py's
pieces: RMSNorm, RoPE on adjacent pairs, SwiGLU) with
F.scaled_dot_product_attention(is_causal=True), logits of the last position,
under torch.inference_mode(), in fp32 (TF32 off, as mechprobe's fp32 path) and in
bf16 (weights and activations); and, in the same run, the cuBLAS bf16 GEMM ceiling
(torch.matmul of two bf16 8192 x 8192 matrices, which cuBLAS computes). With
--train-T: training steps of the same model (cross-entropy on the next token,
torch.optim.AdamW, global-norm clipping at 1) on the tokens bench_gpu trains on
(the same LCG), fp32 with TF32 off (mechprobe's training precision), bf16
autocast, and bf16 autocast with the forward and loss under torch.compile (if it
works there and --budget, 110 s, leaves time: else a torch_compile= line says
why); tokens/s of each.

usage: peer_torch_gpu.py MODEL.bin PREFIX [--reps R] [--train-T T --train-B B] [--budget S]
  PREFIX.tokens.i32   int32 [T] written by `bench_gpu --dump PREFIX`
  PREFIX.logits.f32   float32 [V] mechprobe's fp32 last-position logits on the GPU
Prints key=value lines: timings, tokens/s, and fp32_logits_maxdiff (largest
|torch - mechprobe| over the logits, with their scale), so we know both ran the
same computation. Needs torch with CUDA and numpy (the GPU machine has them).
"""
import argparse, os, signal, sys, time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_torch import forward, load_llama2c, rmsnorm, rope, rope_tables  # noqa: E402


def forward_last(cfg, w, tok, cos, sin):
    B, T = tok.shape
    nh, nkv, hs = cfg['n_head'], cfg['n_kv_head'], cfg['d_head']
    x = F.embedding(tok, w['emb'])
    for l in range(cfg['n_layer']):
        h = rmsnorm(x, w['rms_att'][l])
        q = rope(F.linear(h, w['wq'][l]).view(B, T, nh, hs), cos, sin).transpose(1, 2)
        k = rope(F.linear(h, w['wk'][l]).view(B, T, nkv, hs), cos, sin).transpose(1, 2)
        v = F.linear(h, w['wv'][l]).view(B, T, nkv, hs).transpose(1, 2)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, nh * hs)
        x = x + F.linear(z, w['wo'][l])
        h = rmsnorm(x, w['rms_ffn'][l])
        x = x + F.linear(F.silu(F.linear(h, w['w1'][l])) * F.linear(h, w['w3'][l]), w['w2'][l])
    return F.linear(rmsnorm(x[:, -1:], w['rms_final']), w['wcls'])[0, 0]


class OutOfTime(Exception):
    pass


def train_bench(cfg, w, dev, T, B, reps, deadline):
    V = cfg['vocab']
    i = np.arange(B * T, dtype=np.uint64)
    tok = ((np.uint64(1103515245) * i + np.uint64(12345)) & np.uint64(0xffffffff)) % np.uint64(V)
    tok = torch.from_numpy(tok.astype(np.int64)).view(B, T).to(dev)
    tgt = torch.roll(tok, -1, dims=1)
    tgt[:, -1] = -100
    cos, sin = rope_tables(T, cfg['d_head'])
    cos, sin = cos.to(dev), sin.to(dev)
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    # eager fp32, eager bf16 autocast, then the bf16 autocast forward and loss under
    # torch.compile if it works here and the time left allows (compiling a 12-layer
    # model can take a minute): on failure or past the deadline it says so and stops
    for name, amp, compiled in (('fp32', False, False), ('bf16_autocast', True, False),
                                ('bf16_autocast_compiled', True, True)):
        p = {k: v.to(dev, torch.float32).clone().requires_grad_(True) for k, v in w.items() if k != 'wcls'}
        p['wcls'] = p['emb'] if w['wcls'] is w['emb'] else w['wcls'].to(dev).clone().requires_grad_(True)
        params = list({id(v): v for v in p.values()}.values())  # tied: the classifier is the embedding
        opt = torch.optim.AdamW(params, lr=1e-4)

        def fwd_loss():
            with torch.autocast('cuda', dtype=torch.bfloat16, enabled=amp):
                logits = forward(cfg, p, tok, cos, sin, sdpa)
            return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1), ignore_index=-100)

        fl = fwd_loss
        if compiled:
            left = deadline - time.monotonic()
            if not hasattr(torch, 'compile') or left < 20:
                print(f'torch_compile=skipped ({"no torch.compile" if not hasattr(torch, "compile") else f"{left:.0f} s left"})')
                break
            fl = torch.compile(fwd_loss)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = fl()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            return loss

        if compiled:
            def alarm(signum, frame):
                raise OutOfTime()
            old = signal.signal(signal.SIGALRM, alarm)
            signal.alarm(max(1, int(deadline - time.monotonic())))
            try:
                sec, loss = timed(step, reps)
            except OutOfTime:
                print('torch_compile=out of time (compiling and timing did not finish before the deadline)')
                break
            except Exception as e:  # a backend that cannot compile here
                print(f'torch_compile=failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}')
                break
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
        else:
            sec, loss = timed(step, reps)
        print(f'torch_train_{name}_s={sec:.4f}\ntorch_train_{name}_tok_s={B * T / sec:.0f}')
        del p, params, opt


def timed(fn, reps):
    fn()  # warm-up
    torch.cuda.synchronize()
    best, out = 1e30, None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model')
    ap.add_argument('prefix')
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--train-T', type=int, default=0)
    ap.add_argument('--train-B', type=int, default=4)
    ap.add_argument('--budget', type=float, default=110, help='seconds for the whole run (torch.compile only within it)')
    a = ap.parse_args()
    deadline = time.monotonic() + a.budget
    if not torch.cuda.is_available():
        print('skip=torch sees no CUDA device')
        return 77
    dev = torch.device('cuda')
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f'torch={torch.__version__} cuda={torch.version.cuda} gpu={torch.cuda.get_device_name(0)}')
    cfg, w = load_llama2c(a.model)
    tok = torch.from_numpy(np.fromfile(a.prefix + '.tokens.i32', dtype='<i4').astype(np.int64))[None].to(dev)
    ref = np.fromfile(a.prefix + '.logits.f32', dtype='<f4')
    T = tok.shape[1]
    cos, sin = rope_tables(T, cfg['d_head'])
    with torch.inference_mode():
        for name, dt in (('fp32', torch.float32), ('bf16', torch.bfloat16)):
            wd = {k: v.to(dev, dt) for k, v in w.items()}
            c, s = cos.to(dev, dt), sin.to(dev, dt)
            sec, out = timed(lambda: forward_last(cfg, wd, tok, c, s), a.reps)
            print(f'torch_{name}_s={sec:.4f}\ntorch_{name}_tok_s={T / sec:.0f}')
            if name == 'fp32':
                got = out.float().cpu().numpy()
                print(f'fp32_logits_maxdiff={np.abs(got - ref).max():.3g} (scale {np.abs(ref).max():.3g})')
            del wd
        n = 8192
        x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        sec, _ = timed(lambda: [x @ y for _ in range(10)], 2)
        print(f'cublas_bf16_gemm_tflops={2.0 * n ** 3 * 10 / sec / 1e12:.1f} (torch.matmul bf16 {n}^3)')
        x = torch.randn(n, n, device=dev, dtype=torch.float32)
        y = torch.randn(n, n, device=dev, dtype=torch.float32)
        sec, _ = timed(lambda: [x @ y for _ in range(3)], 2)
        print(f'cublas_fp32_gemm_tflops={2.0 * n ** 3 * 3 / sec / 1e12:.1f} (torch.matmul fp32 {n}^3, TF32 off)')
        del x, y
    if a.train_T:
        train_bench(cfg, w, dev, a.train_T, a.train_B, a.reps, deadline)
    return 0


if __name__ == '__main__':
    sys.exit(main())
