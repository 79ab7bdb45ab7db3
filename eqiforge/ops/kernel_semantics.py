"""What each kernel kind computes, in PyTorch: the one definition of the kernel layer's meaning.

Each function is the core of one kernel kind (a GEMM's accumulator, a row reduction's result, attention);
fused expressions around it (epilogues, prologues) are evaluated by the caller. Three users, one text:
the op table's reference implementations wrap these functions (constant folding, rule tests, plan
validation and the torch backend's kernel nodes run them); the triton backend copies this module's source
into a generated module whose kernel cannot run in Triton (so this module imports only torch); the Triton
templates are tested against them. Tensors arrive in the kernel's compute dtype (float32, or float64 when
the program is float64: a kernel never computes narrower than its program).
"""
import torch


def gemm(a, b, a_transposed, b_transposed, compute):
    """The accumulator of out = A @ B in ``compute``; an operand given transposed ([..., K, M] for A,
    [..., N, K] for B) is read transposed in place."""
    a = a.transpose(-1, -2) if a_transposed else a
    b = b.transpose(-1, -2) if b_transposed else b
    return torch.matmul(a.to(compute), b.to(compute))


def _moments(v, eps):
    """A layer norm's statistics: the mean and 1/std of each row, side by side."""
    var, mean = torch.var_mean(v, -1, correction=0, keepdim=True)
    return torch.cat([mean, torch.rsqrt(var + eps)], -1)


#: a row reduction's result over the last dim of ``v`` (its prologue applied), by kind
ROW = {
    "sum": lambda v, eps: v.sum(-1, keepdim=True),
    "max": lambda v, eps: v.amax(-1, keepdim=True),
    "min": lambda v, eps: v.amin(-1, keepdim=True),
    "logsumexp": lambda v, eps: torch.logsumexp(v, -1, keepdim=True),
    "softmax": lambda v, eps: torch.softmax(v, -1),
    "log_softmax": lambda v, eps: torch.log_softmax(v, -1),
    "layer_norm": lambda v, eps: torch.nn.functional.layer_norm(v, v.shape[-1:], eps=eps),
    "rms_norm": lambda v, eps: v * torch.rsqrt(v.square().mean(-1, keepdim=True) + eps),
    "moments": _moments,
}


def row_reduce(v, kind, eps):
    """The result of a row kernel of ``kind`` on rows ``v`` (already in the compute dtype)."""
    return ROW[kind](v, eps)


def attention(q, k, v, scale, causal, k_transposed, bias, compute):
    """softmax(scale * q k^T + bias, causal-masked) v in ``compute``. Causal: key j is masked for query i when
    j > i + (Sk - Sq) (bottom-right aligned). Grouped-query: each k/v head serves q.heads / kv.heads query
    heads. A fully masked row gives 0, as PyTorch's SDPA does."""
    kt = k if k_transposed else k.transpose(-1, -2)
    if q.dim() > 2 and kt.shape[-3] != q.shape[-3]:
        kt, v = (t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3) for t in (kt, v))
    scores = torch.matmul(q.to(compute), kt.to(compute)) * scale
    if bias is not None:
        scores = scores + bias.to(compute)
    if causal:
        sq, sk = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=scores.device).triu(sk - sq + 1),
                                    float("-inf"))
    probs = torch.softmax(scores, -1)
    probs = probs.nan_to_num(0.0) if causal or bias is not None else probs
    return torch.matmul(probs, v.to(compute))


def band_matmul(w, x, lo, hi):
    """(``w`` restricted to its band ``lo <= j - i <= hi`` on the last two dims) @ ``x``, one diagonal at a
    time: out[..., i, :] += w[..., i, i + k] * x[..., i + k, :] for each offset k, ``hi - lo + 1`` fused
    multiply-adds over the rows instead of a dense product's ``m`` (a tridiagonal or sliding-window matrix).
    Half-precision operands accumulate in single precision, as PyTorch's matmul does."""
    n, m = w.shape[-2:]
    dtype = torch.result_type(w, x)
    if dtype.is_floating_point and dtype.itemsize < 4:  # summed in single precision, rounded once
        return band_matmul(w.to(torch.float), x.to(torch.float), lo, hi).to(dtype)
    offsets = range(max(lo, 1 - n), min(hi, m - 1) + 1)
    if n == m and 0 in offsets:  # the main diagonal covers every row: its product starts the sum
        out = torch.diagonal(w, 0, -2, -1).unsqueeze(-1) * x
        offsets = [k for k in offsets if k != 0]
    else:
        out = torch.zeros(*torch.broadcast_shapes(w.shape[:-2], x.shape[:-2]), n, x.shape[-1], dtype=dtype,
                          device=x.device)
    for k in offsets:
        diagonal = torch.diagonal(w, k, -2, -1).unsqueeze(-1)
        first, rows = max(0, -k), diagonal.shape[-2]
        out[..., first:first + rows, :].addcmul_(diagonal, x[..., first + k:first + k + rows, :])
    return out
