"""CPU performance kernels behind the paper's modules (``layers.py``): the same values as the textbook
operations up to float rounding, written by hand only where no library op is as fast on CPU (each
says why; the measurements are in docs/performance.md):

- ``math_attention`` / ``prefer_math_attention``: attention as batched matmuls in bf16 on CPU;
- ``log_softmax_fp32``: the output log-softmax straight to fp32;
- ``packed_linear_weights``: inference with linear weights packed into oneDNN's layout, kept between calls;
- ``dropout`` / ``Dropout`` / ``dropout_keep_mask``: a dropout mask from 16 random bits per element (also
  on the attention weights);
- ``smoothed_nll``: output projection + log-softmax + label-smoothed NLL in row blocks (behind
  ``losses.fused_token_losses``);
- ``logit_stats``: the output projection's log-sum-exp and logits at chosen columns in row blocks
  (behind ``losses.copy_losses``).

On GPUs ``F.scaled_dot_product_attention`` runs without cuDNN's kernels (``utils.no_cudnn_attention``).
"""
from __future__ import annotations

import contextlib
import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq_zoo.utils import cpu_has_fast_bf16

NEG_INF = float("-inf")

# Above this many attention scores (B * H * Tq * Tk) the CPU math path falls back to the fused kernel,
# which never holds the full (B, H, Tq, Tk) weights: 2**27 scores are 256 MB in bf16 per layer.
MATH_ATTENTION_MAX_SCORES = 2 ** 27


def prefer_math_attention(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether plain batched matmuls beat ``F.scaled_dot_product_attention`` for these shapes.

    On CPU in bf16 the fused flash kernel is slower than matmul + softmax + matmul, and it costs a fixed
    overhead per call that dominates the few queries of an incremental decoding step; in fp32 with many
    queries it is the faster one. GPUs always take the fused kernels."""
    if q.device.type != "cpu":
        return False
    B, H, Tq, _ = q.shape
    if B * H * Tq * k.size(-2) > MATH_ATTENTION_MAX_SCORES:
        return False
    return Tq <= 8 or q.dtype in (torch.bfloat16, torch.float16)


def math_attention(q, k, v, mask=None, is_causal: bool = False, dropout_p: float = 0.0):
    """softmax(Q K^T / sqrt(d_k) + bias) V (eq. 1) with batched matmuls in the inputs' precision (the
    softmax accumulates in fp32); ``mask`` is boolean, True where attention is allowed. The same values
    as ``F.scaled_dot_product_attention`` up to rounding. A floating ``mask`` is added to the scores.

    Runs over slices of the batch whose score tensors stay under 16 MB: glibc serves larger buffers
    with fresh mmaps, whose first-touch page faults cost more than the matmuls at these sizes."""
    B, H, Tq, _ = q.shape
    Tk = k.size(-2)
    bias = None
    if mask is not None and mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, NEG_INF)
    elif mask is not None:  # already additive (0 / -inf), as F.scaled_dot_product_attention takes it
        bias = mask
    if is_causal:
        causal = torch.zeros(Tq, Tk, dtype=q.dtype, device=q.device).masked_fill_(
            torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).triu_(Tk - Tq + 1), NEG_INF)
        bias = causal if bias is None else bias + causal
    step = max(1, (1 << 24) // max(1, H * Tq * Tk * q.element_size()))
    per_row_bias = bias is not None and bias.dim() == 4 and bias.size(0) > 1
    # split (not slicing): the backward concatenates the slices' gradients instead of zero-filling
    # a full-size gradient per slice
    chunks = zip(q.split(step), k.split(step), v.split(step),
                 bias.split(step) if per_row_bias else [bias] * math.ceil(B / step))
    outs = []
    for qc, kc, vc, bc in chunks:
        scores = torch.matmul(qc * (q.size(-1) ** -0.5), kc.transpose(-2, -1))
        if bc is not None:  # in place: the matmul's backward does not need its output
            scores.add_(bc)
        w = scores.softmax(-1)
        if dropout_p > 0:
            w = dropout(w, dropout_p)
        outs.append(torch.matmul(w, vc))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def log_softmax_fp32(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax in fp32 of (possibly bf16) logits, with one conversion: autocast would first cast the
    logits to fp32 as a separate copy (a (N, V) pass per decoding step)."""
    with torch.autocast(logits.device.type, enabled=False):
        return torch.log_softmax(logits, -1, dtype=torch.float32)


@contextlib.contextmanager
def packed_linear_weights(model: nn.Module, rows: int = 32):
    """Inference on CPU under bf16 autocast: every ``nn.Linear`` of ``model`` runs with its weight cast
    to bf16 and reordered once into oneDNN's blocked layout (as torch.compile's freezing does), instead
    of autocast's plain bf16 copy that oneDNN re-packs on every call; results are bitwise the same.
    ``rows`` is the expected number of input rows (the layout's blocking hint; any number works).

    Without autocast (fp32 inference) the fp32 weights are packed the same way; results equal the plain
    matmul's up to float rounding (a different summation order).

    A no-op when grad is enabled, under autocast to another dtype, under bf16 autocast on CPUs without
    bf16 instructions, or where this torch build lacks the oneDNN ops."""
    if torch.is_grad_enabled():
        yield
        return
    if not torch.is_autocast_enabled("cpu"):
        dtype = torch.float32
    elif torch.get_autocast_dtype("cpu") == torch.bfloat16 and cpu_has_fast_bf16():
        dtype = torch.bfloat16
    else:   # (bf16 forced on a CPU without bf16 instructions, or fp16: leave it be)
        yield
        return
    patched = []
    try:
        for m in model.modules():
            if (type(m) is not nn.Linear or m.weight.device.type != "cpu" or "forward" in m.__dict__
                    or m.weight.dtype not in (torch.float32, torch.bfloat16)):
                continue
            w, b = _packed(m, dtype, rows)

            def forward(x, w=w, b=b):
                return torch.ops.mkldnn._linear_pointwise(x.to(dtype), w, b, "none", [], "")
            m.forward = forward
            patched.append(m)
    except (AttributeError, RuntimeError, NotImplementedError):  # no oneDNN bf16 linear in this build
        for m in patched:
            del m.forward
        patched = []
    try:
        yield
    finally:
        for m in patched:
            del m.forward


# module -> {(dtype, rows): (parameter versions, packed weight, bias)}; weak, and outside the module so
# that pickling or copying a model never meets oneDNN's opaque tensors
_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _packed(m: nn.Linear, dtype: torch.dtype, rows: int):
    """``m``'s weight in ``dtype`` reordered for oneDNN, and its bias in ``dtype``: kept for the module
    while it lives (one entry per dtype and row hint) and made again only when a parameter has changed
    (its version counter moves with every in-place update, as an optimizer step's, and its storage with
    ``.data =``), so that repeated decoding of the same weights, as evaluation and the bench do, packs
    them once. Inference tensors keep no version: not kept."""
    pack = torch.ops.mkldnn._reorder_linear_weight   # AttributeError where the build lacks it (caller falls back)
    try:
        key = tuple((p.data_ptr(), p._version) if p is not None else None for p in (m.weight, m.bias))
    except RuntimeError:          # inference tensors (made under torch.inference_mode)
        key = None
    cache = _PACKED.setdefault(m, {}) if key is not None else {}
    hit = cache.get((dtype, rows))
    if hit is not None and hit[0] == key:
        return hit[1], hit[2]
    w = pack(m.weight.detach().to(dtype), rows)
    b = None if m.bias is None else m.bias.detach().to(dtype)
    cache[(dtype, rows)] = (key, w, b)
    return w, b


def dropout_keep_mask(shape, p: float, device) -> tuple[torch.Tensor, float]:
    """A boolean keep-mask with P(drop) = round(p * 65536) / 65536 and that rate, drawn from torch's
    generator 16 bits per element: one 64-bit draw serves four elements, where ``bernoulli_`` makes
    one draw per element (3-4x the mask's cost on CPU)."""
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-2 ** 63, 2 ** 63 - 1)
    drops = round(p * 65536)
    keep = bits.view(torch.int16)[:n].view(shape) >= drops - 32768
    return keep, drops / 65536


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout`` (not in place) with a cheaper mask on CPU (``dropout_keep_mask``): each element is
    zeroed with probability p (to 1/65536) and the rest scaled by 1 / (1 - p), as ``F.dropout`` does; on
    other devices it is ``F.dropout``. On CPU ``bernoulli_`` draws a full random number per element, about
    four times the cost of this mask."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, True)
    keep, rate = dropout_keep_mask(x.shape, p, x.device)
    scale = keep.to(x.dtype).mul_(1.0 / (1.0 - rate))   # 0 or 1/(1-p); cheaper than torch.where
    return x * scale


class Dropout(nn.Dropout):
    """``nn.Dropout`` with ``dropout``'s cheaper mask on CPU; on other devices (or in place) it is
    ``nn.Dropout``. On CPU the mask cost ~10% of a Transformer training step."""

    def forward(self, x):
        if self.inplace and self.training and self.p > 0.0:
            return F.dropout(x, self.p, True, True)
        return dropout(x, self.p, self.training)


# --------------------------------------------------------------------------- fused output layer + loss
def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype


def _softmax_into(z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """softmax(z) over the last dim written into ``out`` (same shape and dtype; one fused kernel, the
    statistics in fp32), so a reused buffer takes the place of a fresh allocation per block."""
    try:
        return torch._softmax(z, -1, False, out=out)
    except (AttributeError, RuntimeError, TypeError):  # a torch without the out= overload
        return out.copy_(torch.softmax(z, -1))


def _low_precision_cpu(cd: torch.dtype) -> bool:
    return cd in (torch.bfloat16, torch.float16)


class _LogitBlocks:
    """The output layer's logits z = h W^T + b in row blocks, as the fused losses take them (see
    ``_FusedSmoothedNLL`` for the layout and why). Made under the forward's autocast, whose
    dtype is the compute precision ``cd`` (bf16 under autocast, like ``nn.Linear``); iterate under
    autocast off: (first row, logits block). ``saved`` is what the backward needs (``_blocked_grads``)."""

    def __init__(self, h, weight, bias, blocked: bool):
        self.cd = _compute_dtype(h)
        self.acc = torch.promote_types(self.cd, torch.float32)  # statistics: fp32 (fp64 for fp64 models)
        self.N, V = h.size(0), weight.size(0)
        # CPU: blocks of <= 16 MB of fp32 logits (few, large ops; no fresh mmaps); GPU: one block
        self.rows = max(16, (1 << 22) // V) if blocked else self.N
        self.low = blocked and _low_precision_cpu(self.cd)
        with torch.autocast(h.device.type, enabled=False):
            self.W = weight.to(self.cd)
            self.b = None if bias is None else bias.to(self.cd)
            self.hc = h.to(self.cd)
            self.Z = torch.empty(self.N, V, dtype=self.cd, device=h.device) if self.low else None
        self.blocks: list[torch.Tensor] = []

    def __iter__(self):
        for r in range(0, self.N, self.rows):
            if self.low:
                z = torch.mm(self.hc[r:r + self.rows], self.W.t(), out=self.Z[r:r + self.rows])
                if self.b is not None:
                    z.add_(self.b)
            else:
                z = F.linear(self.hc[r:r + self.rows], self.W, self.b)       # (rows, V)
                self.blocks.append(z)
            yield r, z

    @property
    def saved(self) -> list[torch.Tensor]:
        return [self.Z] if self.low else self.blocks


def _blocked_grads(saved, h, W, rows: int, low: bool, acc, need_h: bool, need_w: bool, need_b: bool, into_g):
    """dh, dW, db (in ``acc``; None where not needed) of the fused losses from their saved logits
    (``_LogitBlocks.saved``): per block, G = softmax(z) (one fused kernel, into a reused buffer, or in
    place in the one bf16 buffer: a second backward then fails autograd's version check), which
    ``into_g(G, first row, rows)`` turns into dL/dz in place; then dh = G W, dW += G^T h, db += sum G
    (the bf16 buffer's products once over all rows). dW comes in the weight's own (V, d) layout: a
    (d, V) sum handed back transposed made autograd copy it into the parameter's layout, after a
    strided multiply by the upstream gradient."""
    with torch.autocast(h.device.type, enabled=False):
        hc = h.to(W.dtype)
        Z = saved[0] if low else None
        blocks = list(Z.split(rows)) if low else saved
        buf = torch.empty_like(blocks[0]) if blocks and not low else None
        gh = torch.empty(h.shape, dtype=acc, device=h.device) if need_h and not low else None
        gW = torch.zeros(W.shape, dtype=acc, device=h.device) if need_w and not low else None
        gb = torch.zeros(W.size(0), dtype=acc, device=h.device) if need_b else None
        for i, z in enumerate(blocks):
            r, n = i * rows, z.size(0)
            G = _softmax_into(z, z if low else buf[:n])
            into_g(G, r, n)
            if need_b:
                gb += G.sum(0)   # (fp32 accumulation inside; a dtype= argument would copy G first)
            if low:              # the products run once over all rows, below
                continue
            if need_h:
                gh[r:r + n] = G @ W
            if need_w and G.dtype == gW.dtype:
                gW.addmm_(G.t(), hc[r:r + n])
            elif need_w:   # a GPU's bf16/fp16 products (one block) into the fp32 sum
                gW += G.t() @ hc[r:r + n]
        if low:
            gh = (Z @ W).to(acc) if need_h else None
            gW = (Z.t() @ hc).to(acc) if need_w else None
    return gh, gW, gb


class _FusedSmoothedNLL(torch.autograd.Function):
    """Sum over rows of the label-smoothed NLL of softmax(h W^T + b) without the (N, V) log-probabilities.

    Forward, per block of rows (each block's logits stay under 16 MB in fp32: glibc serves larger
    buffers with fresh mmaps, and their first-touch page faults cost more than the arithmetic): logits
    z = h W^T + b in the compute precision (bf16 under autocast, like ``nn.Linear``) and their
    log_softmax in fp32 (one fused kernel), giving NLL = -log_softmax(z)_y and lse = z_0 - log_softmax(z)_0.
    The smoothing term lse - mean(z[:width]) takes the mean from h: mean_j z_j = h . mean_j W_j + mean_j b_j.
    Backward: dL/dz = g (softmax(z) - (1 - eps) onehot(y) - eps / width on the first ``width`` columns).
    Per block, G = softmax(z) - (1 - eps) onehot(y) in the compute precision (one fused softmax kernel
    into a reused buffer, then a scatter), dh = G W, dW += G^T h, db += sum G; the eps / width term is a
    rank-one correction of dh, dW and db, and the upstream g scales those (small) results, so no
    elementwise pass over the logits is spent on either. This avoids elementwise ops that mix bf16 logits
    with fp32 statistics, which CPUs run through a slow type-promoting path.

    bf16/fp16 on CPU (``_low_precision_cpu``): the blocks' logits go into one (N, V) buffer, computed
    as ``mm(h, W^T)`` plus the bias (``F.linear`` with a bias makes oneDNN copy the transposed weight
    on every call), and the backward turns that buffer into G in place, block by block, then takes
    dh = G W and dW = G^T h in one product each rather than adding several bf16 products into an fp32
    sum (one large product is faster).
    dW is then rounded to bf16 once instead of once per block. fp32 keeps the blocked path above."""

    @staticmethod
    def forward(ctx, h, weight, bias, target, eps: float, width: int, blocked: bool):
        lb = _LogitBlocks(h, weight, bias, blocked)
        acc = lb.acc
        with torch.autocast(h.device.type, enabled=False):
            lse = torch.empty(lb.N, dtype=acc, device=h.device)
            nll = torch.empty(lb.N, dtype=acc, device=h.device)
            for r, z in lb:
                n = z.size(0)
                ls = torch.log_softmax(z, -1, dtype=acc)
                nll[r:r + n] = ls.gather(1, target[r:r + n, None]).squeeze(1).neg_()
                lse[r:r + n] = z[:, 0].to(acc) - ls[:, 0]
                del ls
            nll_sum = nll.sum()
            ctx.w_sum = None
            if eps > 0:
                # sum_j W_j over the smoothed columns, for the loss's mean logit and the backward's eps term
                # (from the weight as given: a bf16 copy's sum would mean a (V, d) fp32 conversion)
                ctx.w_sum = weight.detach()[:width].to(acc).sum(0)
                mean = h.detach().to(acc) @ (ctx.w_sum / width)
                if bias is not None:
                    mean = mean + bias.detach()[:width].to(acc).mean()
                loss_sum = (1 - eps) * nll_sum + eps * (lse - mean).sum()
            else:
                loss_sum = nll_sum.clone()
        ctx.save_for_backward(h, lb.W, target, *lb.saved)
        ctx.has_bias, ctx.eps, ctx.width, ctx.rows, ctx.low = bias is not None, eps, width, lb.rows, lb.low
        ctx.wdtype, ctx.acc = weight.dtype, acc
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad, _grad_nll):
        h, W, target, *saved = ctx.saved_tensors
        eps, width, acc = ctx.eps, ctx.width, ctx.acc
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = ctx.has_bias and ctx.needs_input_grad[2]
        hit = torch.full((1, 1), -(1 - eps), dtype=W.dtype, device=h.device)

        def into_g(G, r, n):   # softmax(z) - (1 - eps) onehot(y); the eps term is rank-one, below
            G.scatter_add_(1, target[r:r + n, None], hit.expand(n, 1))

        gh, gW, gb = _blocked_grads(saved, h, W, ctx.rows, ctx.low, acc, need_h, need_w, need_b, into_g)
        with torch.autocast(h.device.type, enabled=False):
            if eps > 0:  # the -eps / width on the first ``width`` columns of every row of G
                c = eps / width
                if need_h:
                    gh -= c * ctx.w_sum
                if need_w:
                    gW[:width] -= c * h.to(acc).sum(0)
                if need_b:
                    gb[:width] -= c * h.size(0)
            g = grad.to(acc)
            gh = gh.mul_(g).to(h.dtype) if need_h else None
            gW = gW.mul_(g).to(ctx.wdtype) if need_w else None
            gb = gb.mul_(g).to(ctx.wdtype) if need_b else None
        return gh, gW, gb, None, None, None, None


class _LogitStats(torch.autograd.Function):
    """Of the logits z = h W^T + b (N, V), without keeping an fp32 (N, V) tensor beyond the blocks: each
    row's log-sum-exp (N,) and the logits at ``index`` (N, K), both in fp32 (fp64 for fp64 models).
    What a loss over a mixture needs when it reads the vocabulary distribution at a few columns only
    (``losses.copy_losses``: the target and the source words). Forward as ``_FusedSmoothedNLL``'s
    (``_LogitBlocks``). Backward: dL/dz = g_lse softmax(z) + scatter(index, g_index), formed per block
    (``_blocked_grads``)."""

    @staticmethod
    def forward(ctx, h, weight, bias, index, blocked: bool):
        lb = _LogitBlocks(h, weight, bias, blocked)
        with torch.autocast(h.device.type, enabled=False):
            lse = torch.empty(lb.N, dtype=lb.acc, device=h.device)
            picked = torch.empty(index.shape, dtype=lb.acc, device=h.device)
            for r, z in lb:
                n = z.size(0)
                ls = torch.log_softmax(z, -1, dtype=lb.acc)   # one fused kernel; lse = z_0 - log_softmax(z)_0
                lse[r:r + n] = z[:, 0].to(lb.acc) - ls[:, 0]
                del ls
                picked[r:r + n] = z.gather(1, index[r:r + n]).to(lb.acc)
        ctx.save_for_backward(h, lb.W, index, *lb.saved)
        ctx.has_bias, ctx.rows, ctx.low, ctx.wdtype, ctx.acc = bias is not None, lb.rows, lb.low, weight.dtype, lb.acc
        return lse, picked

    @staticmethod
    def backward(ctx, g_lse, g_picked):
        h, W, index, *saved = ctx.saved_tensors
        need_b = ctx.has_bias and ctx.needs_input_grad[2]

        def into_g(G, r, n):
            if g_lse is not None:
                G.mul_(g_lse[r:r + n, None].to(G.dtype))
            else:
                G.zero_()
            if g_picked is not None:
                G.scatter_add_(1, index[r:r + n], g_picked[r:r + n].to(G.dtype))

        gh, gW, gb = _blocked_grads(saved, h, W, ctx.rows, ctx.low, ctx.acc, ctx.needs_input_grad[0],
                                    ctx.needs_input_grad[1], need_b, into_g)
        return (None if gh is None else gh.to(h.dtype), None if gW is None else gW.to(ctx.wdtype),
                None if gb is None else gb.to(ctx.wdtype), None, None)


def logit_stats(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logsumexp_j z_j (N,), z at ``index`` (N, K)) of z = h W^T + b for an output layer ``nn.Linear(d, V)``
    = (weight, bias), h (N, d), index (N, K) in [0, V), in fp32 (see ``_LogitStats``)."""
    return _LogitStats.apply(h, weight, bias, index, h.device.type == "cpu")


def smoothed_nll(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                 label_smoothing: float, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of label-smoothed NLL, sum of NLL) of log_softmax(h W^T + b) at ``target`` (N,), for rows h (N, d)
    that are all real tokens, in row blocks (see ``_FusedSmoothedNLL``); ``losses.fused_token_losses``
    is the entry point."""
    return _FusedSmoothedNLL.apply(h, weight, bias, target, float(label_smoothing), int(width),
                                   h.device.type == "cpu")
