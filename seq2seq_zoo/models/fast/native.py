"""Compiled CPU loops for the one part of the recurrent family's training that no library op fuses: the
additive attention with coverage of a teacher-forced pass (See et al. 2017, eq. 11), every step at once.

Why by hand: with coverage, step t's energies e_tj = v^T tanh(k_j + W s_t + cov_tj w_c) read the
coverage of the steps before it, so the T steps run one after another, and each step's (B, S, n)
pre-activation is a fresh buffer that the eager path (``rnn_kernels.additive_energy``) passes over four
times forward and six times backward, plus autograd's sum of the per-step key gradients; at the full
CNN shape (batch 16, 400 source positions, hidden 256, 63 steps) that is about 1.3 s of a 2.8 s update
on one thread, nearly all of it memory traffic. The loops here run source by source (its keys, 400 KB,
stay in the L2 cache for all T steps) and pass over each (S, n) slice once per step forward and once
backward, recomputing the sigmoid in the backward instead of keeping (B, T, S, n) activations.
``torch.compile`` (inductor) was tried first: its kernels took longer than these to run (it splits the
backward's four reductions over different axes into separate passes) and a minute to compile.

The loops are plain C99 built with the system C compiler on first use (about a second) into
``$ZOO_CACHE/native`` (default ~/.cache/seq2seq-zoo/native), keyed by the source and the compiler flags;
they are loaded with ctypes, so no PyTorch headers are compiled. Where no compiler works, ``available()``
is False and the callers keep the eager path (same values up to float rounding; tests compare both).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

_SOURCE = r"""
#include <math.h>
#include <string.h>
#include <stdlib.h>

/* exp(x) for |x| <= 87 to about 1 ulp (Cephes' expf: x = k ln 2 + r, |r| <= ln 2 / 2, a degree-7
   polynomial in r, times 2^k built in the exponent bits), written so that the compiler vectorizes it
   (libm's expf is a call per element) */
static inline float exp_(float x) {
    const float k = floorf(x * 1.44269504088896341f + 0.5f);
    const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    union { int i; float f; } s;
    s.i = ((int)k + 127) << 23;
    return p * s.f;
}

/* sigmoid, its argument clamped to +-80 (where it saturates in float; keeps exp finite) */
static inline float sig(float u) {
    u = u > 80.f ? 80.f : (u < -80.f ? -80.f : u);
    return 1.f / (1.f + exp_(-u));
}

/* Forward of B sources, T steps: A[b,t,:] = softmax_j over mask of e_tj,
   e_tj = sum_n sigmoid(keys2[b,j,n] + 2 q[b,t,n] + 2 w[n] cov_tj) 2 v[n] - sum_n v[n],
   cov_0 = cov0[b], cov_{t+1} = cov_t + A[b,t]; covs[b,t,:] = cov_t. */
void cov_attention_forward(int B, int T, int S, int n, const float *keys2, const float *q, const float *v,
                           const float *w, const unsigned char *mask, const float *cov0, float *A, float *covs) {
    float *q2 = malloc(sizeof(float) * n), *v2 = malloc(sizeof(float) * n), *w2 = malloc(sizeof(float) * n);
    float *cov = malloc(sizeof(float) * S), *e = malloc(sizeof(float) * S);
    float vsum = 0.f;
    for (int i = 0; i < n; i++) { v2[i] = 2.f * v[i]; w2[i] = 2.f * w[i]; vsum += v[i]; }
    for (int b = 0; b < B; b++) {
        const float *K = keys2 + (size_t)b * S * n;
        const unsigned char *m = mask + (size_t)b * S;
        memcpy(cov, cov0 + (size_t)b * S, sizeof(float) * S);
        for (int t = 0; t < T; t++) {
            const float *qt = q + ((size_t)b * T + t) * n;
            for (int i = 0; i < n; i++) q2[i] = 2.f * qt[i];
            float emax = -INFINITY;
            for (int j = 0; j < S; j++) {
                if (!m[j]) continue;
                const float *k = K + (size_t)j * n;
                const float c = cov[j];
                float s = 0.f;
                #pragma omp simd reduction(+:s)
                for (int i = 0; i < n; i++) s += sig(k[i] + q2[i] + c * w2[i]) * v2[i];
                e[j] = s - vsum;
                if (e[j] > emax) emax = e[j];
            }
            float z = 0.f;
            for (int j = 0; j < S; j++) {
                if (m[j]) { e[j] = expf(e[j] - emax); z += e[j]; }
            }
            float *a = A + ((size_t)b * T + t) * S, *cs = covs + ((size_t)b * T + t) * S;
            for (int j = 0; j < S; j++) {
                a[j] = m[j] ? e[j] / z : 0.f;
                cs[j] = cov[j];
                cov[j] += a[j];
            }
        }
    }
    free(q2); free(v2); free(w2); free(cov); free(e);
}

/* Backward: from dA (B,T,S) the gradients dkeys2 (B,S,n), dq (B,T,n), dv (n), dw (n), dcov0 (B,S);
   dkeys2, dv, dw are accumulated (zero them first). */
void cov_attention_backward(int B, int T, int S, int n, const float *keys2, const float *q, const float *v,
                            const float *w, const unsigned char *mask, const float *A, const float *covs,
                            const float *dA, float *dkeys2, float *dq, float *dv, float *dw, float *dcov0) {
    float *q2 = malloc(sizeof(float) * n), *v2 = malloc(sizeof(float) * n), *w2 = malloc(sizeof(float) * n);
    float *gq = malloc(sizeof(float) * n), *gv = malloc(sizeof(float) * n), *gw = malloc(sizeof(float) * n);
    float *R = malloc(sizeof(float) * S), *de = malloc(sizeof(float) * S);
    for (int i = 0; i < n; i++) { v2[i] = 2.f * v[i]; w2[i] = 2.f * w[i]; gv[i] = 0.f; gw[i] = 0.f; }
    float desum = 0.f;
    for (int b = 0; b < B; b++) {
        const float *K = keys2 + (size_t)b * S * n;
        float *G = dkeys2 + (size_t)b * S * n;
        const unsigned char *m = mask + (size_t)b * S;
        for (int j = 0; j < S; j++) R[j] = 0.f;
        for (int t = T - 1; t >= 0; t--) {
            const size_t bt = (size_t)b * T + t;
            const float *a = A + bt * S, *g = dA + bt * S, *cs = covs + bt * S, *qt = q + bt * n;
            float s = 0.f;
            for (int j = 0; j < S; j++) s += a[j] * (g[j] + R[j]);
            for (int j = 0; j < S; j++) { de[j] = a[j] * ((g[j] + R[j]) - s); desum += de[j]; }
            for (int i = 0; i < n; i++) { q2[i] = 2.f * qt[i]; gq[i] = 0.f; }
            for (int j = 0; j < S; j++) {
                if (!m[j] || de[j] == 0.f) continue;
                const float *k = K + (size_t)j * n;
                float *gk = G + (size_t)j * n;
                const float c = cs[j], d = de[j];
                float dc = 0.f;
                #pragma omp simd reduction(+:dc)
                for (int i = 0; i < n; i++) {
                    const float sg = sig(k[i] + q2[i] + c * w2[i]);
                    const float sd = d * sg;
                    const float du = sd * (1.f - sg) * v2[i];
                    gk[i] += du;
                    gq[i] += du;
                    gv[i] += sd;
                    gw[i] += du * c;
                    dc += du * w2[i];
                }
                R[j] += dc;
            }
            float *dqt = dq + bt * n;
            for (int i = 0; i < n; i++) dqt[i] = 2.f * gq[i];
        }
        memcpy(dcov0 + (size_t)b * S, R, sizeof(float) * S);
    }
    for (int i = 0; i < n; i++) { dv[i] += 2.f * gv[i] - desum; dw[i] += 2.f * gw[i]; }
    free(q2); free(v2); free(w2); free(gq); free(gv); free(gw); free(R); free(de);
}
"""

# compiled (-c) with the fast-math code generation, then linked without it: linking with -ffast-math adds
# crtfastmath.o, whose constructor sets flush-to-zero / denormals-are-zero for the whole process when the
# library loads, which changes every other float computation of the process (numpy, hypothesis)
_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-mrecip", "-ffast-math", "-fno-finite-math-only",
          "-fopenmp-simd", "-fPIC"]
_LINK = ["-shared"]
_LIB: ctypes.CDLL | None = None
_TRIED = False


def _cache_dir() -> Path:
    return Path(os.environ.get("ZOO_CACHE") or Path.home() / ".cache" / "seq2seq-zoo") / "native"


def _cpu() -> str:
    """The CPU's model and flags: ``-march=native`` builds for this CPU, so a cache shared by machines of
    several kinds (a cluster's home folder) keeps one library per kind."""
    try:
        with open("/proc/cpuinfo") as f:
            return "".join(sorted({line for line in f if line.startswith(("model name", "flags"))}))
    except OSError:
        import platform
        return platform.processor() or platform.machine()


def _build() -> ctypes.CDLL | None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    key = hashlib.sha256("\0".join([_SOURCE, cc, *_FLAGS, *_LINK, "-c", sys.platform, _cpu()]).encode()).hexdigest()[:16]
    for base in (_cache_dir(), Path(tempfile.gettempdir()) / f"seq2seq-zoo-native-{os.getuid()}"):
        lib = base / f"coverage_{key}.so"
        try:
            if not lib.exists():
                base.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=base) as tmp:
                    src = Path(tmp) / "coverage.c"
                    src.write_text(_SOURCE)
                    out = Path(tmp) / "coverage.so"
                    obj = Path(tmp) / "coverage.o"
                    subprocess.run([cc, *_FLAGS, "-c", str(src), "-o", str(obj)], check=True,
                                   capture_output=True, timeout=120)
                    subprocess.run([cc, *_LINK, str(obj), "-o", str(out), "-lm"], check=True,
                                   capture_output=True, timeout=120)
                    os.replace(out, lib)         # atomic: a concurrent builder finds a whole library or none
            return ctypes.CDLL(str(lib))
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def library() -> ctypes.CDLL | None:
    """The compiled loops, built on first use; None where they cannot be (no C compiler, or
    ``ZOO_NATIVE=0`` in the environment)."""
    global _LIB, _TRIED
    if not _TRIED:
        _TRIED = True
        if os.environ.get("ZOO_NATIVE", "1") != "0":
            _LIB = _build()
    return _LIB


def available() -> bool:
    return library() is not None


def _ptr(t: torch.Tensor):
    return ctypes.c_void_p(t.data_ptr())


def usable(*tensors: torch.Tensor) -> bool:
    """Whether ``coverage_attention`` takes these tensors: fp32 on the CPU, and the loops built."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and available()


def _chunks(B: int) -> list[tuple[int, int]]:
    """Source ranges, one per torch CPU thread (at most B): each runs the loops on its own sources in a
    thread of its own (ctypes releases the GIL during the call)."""
    k = max(1, min(B, torch.get_num_threads()))
    bounds = [B * i // k for i in range(k + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(k) if bounds[i + 1] > bounds[i]]


def _run(calls) -> None:
    if len(calls) == 1:
        calls[0]()
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(calls)) as pool:
        for f in [pool.submit(c) for c in calls]:
            f.result()


def _at(t: torch.Tensor, b: int):
    """Pointer to source b's rows of t (sources first)."""
    return ctypes.c_void_p(t.data_ptr() + b * t.stride(0) * t.element_size())


class _CoverageAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, keys2, q, v, w_c, mask, cov0):
        keys2, q, v, w_c, cov0 = (t.detach().contiguous() for t in (keys2, q, v, w_c, cov0))
        m = mask.to(torch.uint8).contiguous()
        (B, S, n), T = keys2.shape, q.size(1)
        A = torch.empty(B, T, S)
        covs = torch.empty(B, T, S)
        lib = library()
        _run([lambda lo=lo, hi=hi: lib.cov_attention_forward(
            hi - lo, T, S, n, _at(keys2, lo), _at(q, lo), _ptr(v), _ptr(w_c), _at(m, lo), _at(cov0, lo), _at(A, lo),
            _at(covs, lo)) for lo, hi in _chunks(B)])
        ctx.save_for_backward(keys2, q, v, w_c, m, A, covs)
        return A

    @staticmethod
    def backward(ctx, dA):
        keys2, q, v, w_c, m, A, covs = ctx.saved_tensors
        (B, S, n), T = keys2.shape, q.size(1)
        dA = dA.float().contiguous()
        dkeys2, dq, dcov0 = torch.zeros_like(keys2), torch.empty_like(q), torch.empty(B, S)
        chunks = _chunks(B)
        dv, dw = torch.zeros(len(chunks), n), torch.zeros(len(chunks), n)   # per chunk, summed below
        lib = library()
        _run([lambda i=i, lo=lo, hi=hi: lib.cov_attention_backward(
            hi - lo, T, S, n, _at(keys2, lo), _at(q, lo), _ptr(v), _ptr(w_c), _at(m, lo), _at(A, lo), _at(covs, lo),
            _at(dA, lo), _at(dkeys2, lo), _at(dq, lo), _at(dv, i), _at(dw, i), _at(dcov0, lo))
            for i, (lo, hi) in enumerate(chunks)])
        return dkeys2, dq, dv.sum(0), dw.sum(0), None, dcov0


def coverage_attention(keys2: torch.Tensor, q: torch.Tensor, v: torch.Tensor, w_c: torch.Tensor,
                       mask: torch.Tensor, cov0: torch.Tensor) -> torch.Tensor:
    """The attention weights (B, T, S) of T teacher-forced steps with coverage: a_t = softmax over
    ``mask`` (B, S) of e_t, e_tj = v^T tanh(keys_j + q_t + cov_tj w_c) with keys2 = 2 keys (B, S, n)
    (``rnn_kernels.double_keys``), q (B, T, n) the steps' query projections, cov_t = cov0 + sum_{t'<t} a_t'.
    The same values as ``rnn_kernels.additive_energy`` + ``masked_softmax`` step by step, up to float
    rounding; differentiable in keys2, q, v, w_c and cov0. Callers check ``usable`` first."""
    return _CoverageAttention.apply(keys2, q, v, w_c, mask, cov0)
