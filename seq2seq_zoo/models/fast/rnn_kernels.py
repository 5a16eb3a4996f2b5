"""Kernels of the recurrent family's fast implementation (``impl = "fast"``, the default: ``fast.rnn``;
``rnn.py`` keeps the step-by-step textbook path as ``impl = "reference"``). The same values as the
reference up to float rounding, which tests check for the loss, the gradients and greedy and beam decodes.

What a profile of the reference's training step at the bench shape (batch 32, source 256, target 64,
hidden 256) shows it spends its time on, and what replaces it here (figures: docs/performance.md):

- the packed-sequence encoder: on CPU its backward zero-fills a (source tokens x gates) gradient buffer
  at every one of the 256 time steps (the backward of slicing the precomputed input projection), three
  quarters of the step. ``run_encoder`` runs the padded sequence where that is the same computation,
  and a one-layer encoder with padding (the bidirectional LSTM) with its gates held at padding
  (``_run_held``);
- additive attention energies ``v^T tanh(U h_j + W s + b)``: autograd's ``Linear(n, 1)`` backward is a
  rank-1 matmul and a zero-filled outer product per step, and ``torch.tanh`` takes about 2.5x the time
  of a sigmoid on CPU. ``additive_energy`` uses
  tanh x = 2 sigmoid(2x) - 1 with the keys doubled once per source, so a step writes one (B, S, n)
  buffer, in place, and its backward is one ``sigmoid_backward`` of a broadcast product;
- the context ``c_t = a_t h``: its gradient with respect to the encoder output is an outer product
  (B, S, 2n) added up at every step. ``DeferredContext`` records the steps' ``dc_t`` and takes
  ``sum_t a_t^T dc_t`` once, as one batched matmul, when the backward reaches the encoder output;
- the recurrent cell's input projection of ``E y_{t-1}`` does not depend on attention: it is one
  matmul over all steps before the loop, and the cell runs in fp32 with its gate arithmetic written
  out (CPU autocast would run the LSTM through oneDNN's bf16 RNN primitive, which CPUs without bf16
  kernels lack);
- under CPU bf16 autocast, on CPUs with native bf16 products and oneDNN bf16 kernels
  (``cpu_bf16_matmuls``), the one-layer encoder runs in bf16 as the reference's autocast run does, and
  the cell's products run in bf16 with fp32 states and gates.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from seq2seq_zoo.models.layers import run_packed
from seq2seq_zoo.precision import cpu_bf16_kernels
from seq2seq_zoo.utils import cpu_has_fast_bf16


def fp32_on_cpu(device: torch.device):
    """Autocast off on CPU (the recurrent cell and attention energies run in fp32 there); on GPUs the
    caller's autocast stays on."""
    if device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def half_to_float(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 -> fp32; fp32 and fp64 (gradient checks) stay as they are."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


# --------------------------------------------------------------------------------------------- encoder
def run_encoder(rnn, x: torch.Tensor, mask: torch.Tensor):
    """Encoder RNN over embedded sources ``x`` (B, S, m) with ``mask`` (B, S) True at real tokens
    (padding at the end). Returns outputs (B, S, dirs*n), zero at padding, and the final state(s)
    (L*dirs, B, n) after each source's last real token, as the packed run gives them.

    A batch without padding runs as one padded sequence (the same computation). With padding, a
    one-layer unidirectional GRU also runs padded: its outputs at real tokens do not see the padding
    after them and its final state is its output at the last real token. Otherwise (a bidirectional or
    deeper encoder, or an LSTM, whose final cell state no output shows) a one-layer encoder on CPU runs
    unpacked with its gates held at padding (``_run_held``), anything else packed (``run_packed``).

    Under CPU bf16 autocast on a CPU with native bf16 products and oneDNN bf16 kernels
    (``cpu_bf16_matmuls``), as autocast runs the reference's: a one-layer unidirectional GRU runs padded
    under that autocast (fp32 outputs); any other one-layer encoder runs held in bf16 (bf16 outputs, fp32
    final states). The GRU is not held: held in bf16 it trains as fast as under autocast but decodes
    several times slower without gradient, while the held bf16 bidirectional LSTM is faster either
    way."""
    lengths = mask.sum(1).clamp(min=1)
    B, S = mask.shape
    low = cpu_bf16_matmuls(x)
    uni_gru = not rnn.bidirectional and rnn.num_layers == 1 and isinstance(rnn, torch.nn.GRU)
    if low is not None and uni_gru:
        return _run_padded(rnn, x, lengths)        # under the caller's bf16 autocast
    with fp32_on_cpu(x.device):
        x = half_to_float(x)
        if low is not None and rnn.num_layers == 1 and getattr(rnn, "proj_size", 0) == 0:
            return _run_held(rnn, x, mask, lengths, low)
        if bool((lengths == S).all()):
            return rnn(x)
        if uni_gru:
            return _run_padded(rnn, x, lengths)
        if x.device.type == "cpu" and rnn.num_layers == 1 and getattr(rnn, "proj_size", 0) == 0:
            return _run_held(rnn, x, mask, lengths)
        return run_packed(rnn, x, mask)


def _run_padded(rnn, x: torch.Tensor, lengths: torch.Tensor):
    """A one-layer unidirectional GRU over the padded batch: outputs at real tokens do not see the
    padding after them, and the final state is the output at each source's last real token."""
    B, S = x.shape[:2]
    out, final = rnn(x)
    if bool((lengths == S).all()):
        return out, final
    last = (lengths - 1).view(B, 1, 1).expand(B, 1, out.size(-1))
    final = out.gather(1, last).transpose(0, 1).contiguous()
    valid = torch.arange(S, device=x.device) < lengths.unsqueeze(1)
    return out.masked_fill(~valid.unsqueeze(-1), 0.0), final


def cpu_bf16_matmuls(x: torch.Tensor) -> torch.dtype | None:
    """bf16 where the recurrent fast path's encoder and cell products should run in it: on a CPU under
    bf16 autocast with native bf16 matmul instructions (``utils.cpu_has_fast_bf16``) and oneDNN's bf16
    kernels (``precision.cpu_bf16_kernels``), as the reference's autocast run takes oneDNN's bf16 LSTM;
    there the encoder and the cell's products take about 60% of their fp32 time. None elsewhere: these
    run in their inputs' precision (fp32 under CPU autocast; a GPU's autocast stays on)."""
    if (x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.bfloat16 and cpu_has_fast_bf16() and cpu_bf16_kernels()):
        return torch.bfloat16
    return None


# A pre-activation this far from zero saturates a gate exactly: sigmoid(HOLD + a) == 1.0 and
# sigmoid(-HOLD + a) == 0.0 in fp32 and fp64 for any |a| < 1e3 (exp(-9e3) underflows to 0).
HOLD = 1e4


def _hold_column(rnn) -> torch.Tensor:
    """The input-weight column of the padding flag: per gate block (PyTorch's order: LSTM i, f, g, o;
    GRU r, z, n), -HOLD on the LSTM's input gate and +HOLD on its forget gate (c_t = c_{t-1}), +HOLD on
    the GRU's update gate (h_t = h_{t-1}); 0 elsewhere."""
    n = rnn.hidden_size
    lstm = isinstance(rnn, torch.nn.LSTM)
    blocks = [-HOLD, HOLD, 0.0, 0.0] if lstm else [0.0, HOLD, 0.0]
    w = rnn.weight_ih_l0
    return torch.tensor(blocks, dtype=w.dtype, device=w.device).repeat_interleave(n).unsqueeze(1)


def _run_held(rnn, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype | None = None):
    """``run_encoder`` for one layer with padding, without packing: on CPU the packed run's backward
    zero-fills a (source tokens x gates) buffer at every step (a bidirectional LSTM, hidden 128, over 64
    DialogSum sources of mixed lengths up to 192 tokens: 3.6 s forward and backward packed, 0.73 s so;
    whole training steps on bucketed batches: ``tools/encoder_padding.py``). The input gets
    a padding flag whose weight column (``_hold_column``, not trained) saturates the gates at padding so
    that the cell state stays what it was: the forward direction carries its state after the last real
    token to the end (the LSTM's output h = o tanh(c) does change there, so its final h is read at the
    last real token), and the reverse direction, which meets the padding first, keeps its zero initial
    state (h = o tanh(0) = 0) until the first real token, as the packed run starts it. Saturated gates
    have zero derivative, so padding sends no gradient either. Values equal the packed run's up to float
    rounding (tests check outputs, final states and gradients). ``dtype`` (bf16): the run's input and
    weights are cast to it (the HOLD weight rounds to 9984, which saturates as well); its outputs stay
    in it and the final states come back in ``x``'s dtype."""
    B = x.size(0)
    lstm, dirs, n = isinstance(rnn, torch.nn.LSTM), (2 if rnn.bidirectional else 1), rnn.hidden_size
    xf = torch.cat([x, (~mask).to(x.dtype).unsqueeze(-1)], -1)   # + the padding flag
    col = _hold_column(rnn)
    weights = list(rnn._flat_weights)
    per_dir = len(weights) // dirs
    for d in range(dirs):
        weights[d * per_dir] = torch.cat([weights[d * per_dir], col], 1)
    if dtype is not None:
        weights = [w.to(dtype) for w in weights]
    h0 = x.new_zeros(dirs, B, n, dtype=weights[0].dtype)
    args = (weights, rnn.bias, 1, 0.0, rnn.training, rnn.bidirectional, rnn.batch_first)
    with torch.autocast("cpu", enabled=False):   # CPU only: the cell runs in the weights' dtype
        xf = xf.to(weights[0].dtype)
        if not lstm:
            out, h = torch._VF.gru(xf, h0, *args)
            return out.masked_fill(~mask.unsqueeze(-1), 0.0), h.to(x.dtype)
        out, h, c = torch._VF.lstm(xf, (h0, h0), *args)
    # the forward direction's h after its last real token (the reverse direction's final h is exact)
    last = (lengths - 1).view(B, 1, 1).expand(B, 1, n)
    h = torch.cat([out[..., :n].gather(1, last).transpose(0, 1), h[1:]], 0).contiguous()
    return out.masked_fill(~mask.unsqueeze(-1), 0.0), (h.to(x.dtype), c.to(x.dtype))


# ------------------------------------------------------------------------------------------- attention
def _no_autocast(x: torch.Tensor):
    """Autocast off for a custom backward, which converts its operands itself. On a GPU the forward ran
    under the caller's autocast (bf16/fp16 matmul outputs) and the backward's autocast state is not the
    forward's, so an op there must not depend on it (``torch.amp.custom_bwd`` would need the device type
    at definition; these kernels serve CPU and GPU)."""
    return torch.autocast(x.device.type, enabled=False)


class _AdditiveEnergy(torch.autograd.Function):
    """e = v^T tanh(x) with x = keys + q [+ cov w_c], from the doubled inputs keys2 = 2 keys (B, S, n),
    q2 = 2 q (B, T, n): tanh x = 2 sigmoid(2x) - 1, so e = 2 v^T sigmoid(u) - sum(v) with u = keys2 + q2
    [+ 2 cov w_c], and only sigmoid(u) (B, T, S, n) is written and kept. -> (B, T, S); cov (B, T, S) or None."""

    @staticmethod
    def forward(ctx, keys2, q2, v, cov, w_c):
        e, sig = _energy_whole(keys2, q2, v, cov, w_c)
        ctx.save_for_backward(sig, v, cov, w_c)
        return e

    @staticmethod
    def backward(ctx, de):
        sig, v, cov, w_c = ctx.saved_tensors
        with _no_autocast(de):
            # a GPU keeps autocast on in the forward (``fp32_on_cpu``), so the energies came out of a bf16/fp16
            # matmul: their gradient is taken in sig's precision (fp32), every operand converted explicitly
            de = de.to(sig.dtype)
            # du = sigmoid'(u) (de 2v) = 2v G with G = de sigmoid'(u) (a broadcast sigmoid_backward): one
            # (B, T, S, n) buffer and pass fewer than forming de 2v first, and 2v scales G's sums
            G = torch.ops.aten.sigmoid_backward(de.unsqueeze(-1), sig)      # (B, T, S, n)
            v2 = (2 * v).to(G.dtype)
            n = sig.size(-1)
            dkeys2 = dq2 = dv = dcov = dw_c = None
            if ctx.needs_input_grad[1]:
                dq2 = G.sum(2).mul_(v2)
            if ctx.needs_input_grad[2]:
                dv = 2 * sig.reshape(-1, n).t().mv(de.reshape(-1)) - de.sum()
            if cov is not None and ctx.needs_input_grad[3]:
                dcov = torch.matmul(G, v2 * (2 * w_c.to(G.dtype)))
            if cov is not None and ctx.needs_input_grad[4]:
                dw_c = v2 * (2 * G.reshape(-1, n).t().mv(cov.reshape(-1).to(G.dtype)))
            if ctx.needs_input_grad[0]:   # last: with one step it scales G in place
                dkeys2 = G.squeeze(1).mul_(v2) if G.size(1) == 1 else G.sum(1).mul_(v2)
            return dkeys2, dq2, dv, dcov, dw_c


def additive_energy(keys2, q, v, cov=None, w_c=None):
    """v^T tanh(keys_j + q_t [+ cov_tj w_c]): keys2 = 2 (U h_j + b) (B, S, n), doubled once per source
    (``double_keys``), q (B, T, n) (``W s``), v (n,), cov (B, T, S) -> energies (B, T, S)."""
    if cov is None or w_c is None:
        cov, w_c = None, None
    if not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in (keys2, q, v, cov, w_c)):
        if keys2.device.type == "cpu":
            return _energy_in_blocks(keys2, 2 * q, v, cov, w_c)
        return _energy_whole(keys2, 2 * q, v, cov, w_c)[0]
    return _AdditiveEnergy.apply(keys2, 2 * q, v, cov, w_c)


def _energy_whole(keys2, q2, v, cov, w_c):
    """The energies (B, T, S) and sigmoid(u) (B, T, S, n) in one broadcast buffer: ``_AdditiveEnergy``'s
    forward, and decoding's form off the CPU. The CPU's blocked loop (``_energy_in_blocks``) launches about
    four kernels per source and block, which on a GPU made beam decoding slower than the reference's; here
    a step is four kernels whatever the batch."""
    u = keys2.unsqueeze(1) + q2.unsqueeze(2)                         # (B, T, S, n)
    if cov is not None:
        u.addcmul_(cov.unsqueeze(-1), 2 * w_c)
    sig = u.sigmoid_()
    return torch.matmul(sig, 2 * v) - v.sum(), sig


def _energy_in_blocks(keys2, q2, v, cov, w_c, block: int = 1 << 18):
    """``_AdditiveEnergy.forward`` without gradient (decoding), over blocks of source positions whose
    (T, s, n) buffer (``block`` elements) is reused and stays in cache, so a step pays no page faults for
    a fresh buffer. Blocks of 2^18 elements (1 MB in fp32: one source of the bench's beam-4 step, 8 blocks
    a step) rather than 2^16: a quarter of the operations, each still small enough for the cache."""
    B, S, n = keys2.shape
    T = q2.size(1)
    s = max(1, min(S, block // max(1, T * n)))
    out = torch.empty(B, T, S, dtype=keys2.dtype, device=keys2.device)
    buf = torch.empty(T, s, n, dtype=keys2.dtype, device=keys2.device)
    v2, w2 = 2 * v, (None if w_c is None else 2 * w_c)
    for b in range(B):
        qb = q2[b].unsqueeze(1)
        for j in range(0, S, s):
            k = min(s, S - j)
            u = torch.add(keys2[b, j:j + k].unsqueeze(0), qb, out=buf[:, :k])
            if cov is not None:
                u.addcmul_(cov[b, :, j:j + k].unsqueeze(-1), w2)
            out[b, :, j:j + k] = torch.matmul(u.sigmoid_(), v2)
    return out.sub_(v.sum())


def double_keys(keys: torch.Tensor) -> torch.Tensor:
    """2 (U h_j + b) in at least fp32, the form ``additive_energy`` takes."""
    return 2 * half_to_float(keys)


class _Tap(torch.autograd.Function):
    """Identity on the encoder output; its backward adds the deferred context gradient."""

    @staticmethod
    def forward(ctx, memory, owner):
        ctx.owner = owner
        ctx.set_materialize_grads(False)
        return memory.view_as(memory)

    @staticmethod
    def backward(ctx, g):
        with _no_autocast(g if g is not None else ctx.owner.memory):
            d = ctx.owner.memory_grad()
        if g is not None:
            d = d + g if d is not None else g
        return d, None


class _Context(torch.autograd.Function):
    """c_t = a_t memory (B, k); the gradient for memory is left to the owner's ``_Tap``."""

    @staticmethod
    def forward(ctx, a, memory, owner, t):
        ctx.owner, ctx.t = owner, t
        ctx.save_for_backward(memory)
        return torch.bmm(a.unsqueeze(1), memory).squeeze(1)

    @staticmethod
    def backward(ctx, dc):
        (memory,) = ctx.saved_tensors
        dc = dc.to(memory.dtype)   # a GPU's autocast made c_t in bf16/fp16: its gradient in memory's precision
        ctx.owner.grads[ctx.t] = dc
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        with _no_autocast(dc):
            da = torch.bmm(dc.unsqueeze(1), memory.transpose(1, 2)).squeeze(1)
        return da, None, None, None


class DeferredContext:
    """Contexts c_t = a_t memory of the steps of one teacher-forced pass. The gradient for ``memory``,
    sum_t a_t^T dc_t, is taken once (one batched matmul over all steps) when the backward reaches the
    encoder output, instead of an outer product added up at every step."""

    def __init__(self, memory: torch.Tensor):
        self.memory = memory
        self.weights: list[torch.Tensor] = []
        self.grads: dict[int, torch.Tensor] = {}
        self.deferred = memory.requires_grad and torch.is_grad_enabled()
        self.handle = _Tap.apply(memory, self) if self.deferred else memory

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        """Context of the next step's attention weights a (B, S) -> (B, k)."""
        if not self.deferred:
            return torch.bmm(a.unsqueeze(1).to(self.memory.dtype), self.memory).squeeze(1)
        t = len(self.weights)
        a = a.to(self.memory.dtype)
        self.weights.append(a.detach())
        return _Context.apply(a, self.handle, self, t)

    def memory_grad(self) -> torch.Tensor | None:
        if not self.grads:
            return None
        ref = next(iter(self.grads.values()))
        dC = torch.stack([self.grads.get(t, torch.zeros_like(ref)) for t in range(len(self.weights))], 1)
        self.grads = {}
        A = torch.stack(self.weights, 1)                                  # (B, T, S)
        return torch.bmm(A.transpose(1, 2), dC.to(A.dtype))               # (B, S, k)


# ------------------------------------------------------------------------------------------- the cell
def cell_weights(rnn, layer: int):
    """(W_ih, W_hh, b_ih, b_hh) of one layer of an ``nn.GRU`` / ``nn.LSTM``."""
    return tuple(getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))


def gru_pointwise(gx: torch.Tensor, gh: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """PyTorch's GRU cell from the input and hidden projections (gate order r, z, n):
    r = sigma(x_r + h_r), z = sigma(x_z + h_z), n = tanh(x_n + r h_n), h' = (1 - z) n + z h."""
    xr, xz, xn = gx.chunk(3, -1)
    hr, hz, hn = gh.chunk(3, -1)
    r = torch.sigmoid(xr + hr)
    z = torch.sigmoid(xz + hz)
    new = torch.tanh(torch.addcmul(xn, r, hn))
    return torch.addcmul(new, z, h - new)


def lstm_pointwise(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's LSTM cell from the summed projections (gate order i, f, g, o):
    c' = sigma(f) c + sigma(i) tanh(g), h' = sigma(o) tanh(c')."""
    i, f, g, o = gates.chunk(4, -1)
    c = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
    return torch.sigmoid(o) * torch.tanh(c), c


class StackedCell:
    """One time step of a multi-layer ``nn.GRU`` / ``nn.LSTM`` with the module's own weights, layer 0's
    input split in two parts: ``pre`` (its projection with bias, computed for all steps at once by
    ``project_steps``) and ``side`` (e.g. the attention context, projected at each step). Dropout
    between layers as the module applies it. ``low`` (bf16, from ``cpu_bf16_matmuls``): the products
    run in it, with the weights cast once per pass; the states and gate arithmetic stay in fp32."""

    def __init__(self, rnn, steady_width: int, training: bool, low: torch.dtype | None = None):
        self.rnn, self.lstm = rnn, isinstance(rnn, torch.nn.LSTM)
        self.L, self.p = rnn.num_layers, (rnn.dropout if training else 0.0)
        self.training, self.low = training, low
        cast = (lambda t: t.to(low)) if low is not None else (lambda t: t)
        w_ih, w_hh, b_ih, b_hh = cell_weights(rnn, 0)
        self.w_steady, self.w_side = cast(w_ih[:, :steady_width]), cast(w_ih[:, steady_width:])
        self.b_ih, self.w_hh, self.b_hh = cast(b_ih), cast(w_hh), cast(b_hh)
        self.has_side = self.w_side.size(1) > 0
        self.upper = [tuple(cast(w) for w in cell_weights(rnn, k)) for k in range(1, self.L)]

    def _linear(self, x, w, b=None):
        if self.low is None:
            return F.linear(x, w, b)
        return F.linear(x.to(self.low), w, b).float()

    def project_steps(self, x: torch.Tensor) -> torch.Tensor:
        """Layer 0's projection of the part of its input known for all steps: (B, T, w) -> (B, T, G)."""
        return half_to_float(self._linear(x, self.w_steady, self.b_ih))

    def __call__(self, pre_t, side, hid):
        """pre_t (B, G) from ``project_steps``; side (B, w_side) or None; hid: (h,) or (h, c), each
        (L, B, n) -> the top layer's output (B, n) and the new state as a tuple of (L, B, n)."""
        hs, cs = [], []
        h0 = hid[0][0]
        lin = self._linear
        if self.lstm:
            gates = pre_t + lin(h0, self.w_hh, self.b_hh)
            if self.has_side:
                gates = gates + lin(side, self.w_side)
            h, c = lstm_pointwise(gates, hid[1][0])
            cs.append(c)
        else:
            gx = pre_t + lin(side, self.w_side) if self.has_side else pre_t
            h = gru_pointwise(gx, lin(h0, self.w_hh, self.b_hh), h0)
        hs.append(h)
        for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(self.upper, start=1):
            x = F.dropout(h, self.p, self.training) if self.p > 0 else h
            hk = hid[0][k]
            if self.lstm:
                h, c = lstm_pointwise(lin(x, w_ih, b_ih) + lin(hk, w_hh, b_hh), hid[1][k])
                cs.append(c)
            else:
                h = gru_pointwise(lin(x, w_ih, b_ih), lin(hk, w_hh, b_hh), hk)
            hs.append(h)
        new = (torch.stack(hs),) + ((torch.stack(cs),) if self.lstm else ())
        return h, new
