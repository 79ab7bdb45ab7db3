"""The families suite: algebra program families EqiForge was not tuned for, each with its hand twin (issue 42).

Every family is one piece of algebra a person would simplify by hand, written the way it turns up in real
code, in four classes: opaque ops with plain algebra behind them (``diag``, ``trace``, ``kron``, ``cumsum``,
``flip``, ``roll``, ``repeat``, ``sort``, ``logsumexp``), structure built from a mask (``tril``/``triu``, the
identity and bands applied with ``where``, ``masked_fill`` or a multiply), reductions of broadcasts, and
products behind views (reshape, permute, ``block_diag``, heads split and merged), and a few more (shift
invariance, norms of low-rank products). Most families come in two or three spellings, each a program of its
own with its own twin, the cheaper equivalent a careful person would write. The suite was written from the
classes alone, before any rule that handles them, so a miss here is a missing rule.

Each program exists at two sizes: ``SUITE`` at benchmark size (an eager run takes ~0.5-20 ms on 2 cores)
and ``SMALL``, the same programs shrunk, for the correctness test. Inputs are standard normal.
``FAMILIES`` names each family's spellings.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from programs import Program
from torch import nn
from twins import Twin, _fn, _frozen, _mod, _program

# ====================================================================================================
# opaque ops with plain algebra
# ====================================================================================================

# --- row scaling by a diagonal matrix ---

def diag_row_scaling(v, x):
    """diag(v) X = v scaling the rows of X: no n x n matrix, no matrix product."""
    return torch.diag(v) @ x


def eye_row_scaling(v, x):
    """(I * v as a column) X = diag(v) X = v scaling the rows of X."""
    return (torch.eye(v.shape[0]) * v[:, None]) @ x


def diag_embed_row_scaling(v, x):
    """Batched diag_embed(v) X = v scaling the rows of each X."""
    return torch.diag_embed(v) @ x


# --- column scaling by a diagonal matrix ---

def diag_col_scaling(x, v):
    """X diag(v) = v scaling the columns of X."""
    return x @ torch.diag(v)


def eye_col_scaling(x, v):
    """X (I * v) = X diag(v) = v scaling the columns of X."""
    return x @ (torch.eye(v.shape[0]) * v)


# --- trace of a product ---

def trace_of_product(a, b):
    """trace(A B) = sum(A * B^T): the diagonal alone, without the product."""
    return torch.trace(a @ b)


def diagonal_sum_of_product(a, b):
    """(A B).diagonal().sum() = trace(A B) = sum(A * B^T)."""
    return (a @ b).diagonal().sum()


# --- outer product then a matrix product ---

def torch_outer_matmul(u, v, x):
    """outer(u, v) X = outer(u, v X): a vector-matrix product instead of a matrix product."""
    return torch.outer(u, v) @ x


def einsum_outer_matmul(u, v, x):
    """einsum('i,j->ij', u, v) X = outer(u, v X)."""
    return torch.einsum("i,j->ij", u, v) @ x


# --- Kronecker product with an identity ---

def kron_identity_left(a, x):
    """kron(I_k, A) X = A applied to each of the k row blocks of X: one batched product, no kn x kn matrix."""
    k = x.shape[0] // a.shape[0]
    return torch.kron(torch.eye(k), a) @ x


def kron_identity_right(x, a):
    """X kron(A, I_k) = A^T applied to X's columns grouped as (n, k): one batched product."""
    k = x.shape[1] // a.shape[0]
    return x @ torch.kron(a, torch.eye(k))


# --- cumulative sum then a difference ---

def cumsum_then_difference(x):
    """Differences of neighbouring cumulative sums give back the elements: cumsum(x)[1:] - cumsum(x)[:-1] = x[1:]."""
    c = torch.cumsum(x, dim=1)
    return c[:, 1:] - c[:, :-1]


def cumsum_then_diff(x):
    """torch.diff of a cumulative sum = the elements after the first."""
    return torch.diff(x.cumsum(dim=-1), dim=-1)


# --- flips that cancel ---

def double_flip_add(x, y):
    """flip(flip(x)) + y = x + y: the flips cancel."""
    return torch.flip(torch.flip(x, dims=[0]), dims=[0]) + y


def flip_around_elementwise(x):
    """flip(tanh(flip(x))) = tanh(x): an elementwise op commutes with a flip, then the flips cancel."""
    return torch.flip(torch.tanh(torch.flip(x, dims=[-1])), dims=[-1])


# --- roll then a reduction ---

def roll_then_sum(x):
    """Row sums of a rolled x = x's row sums: a roll only permutes the summed elements."""
    return torch.roll(x, shifts=3, dims=1).sum(dim=1)


def rolled_dot(x, y):
    """Row dot products of x and y rolled alike = the row dot products of x and y."""
    return (torch.roll(x, 5, -1) * torch.roll(y, 5, -1)).sum(-1)


# --- repeat or tile then a reduction ---

def repeat_then_sum(x):
    """Row sums of x repeated 4 times along the row = 4 times x's row sums."""
    return x.repeat(1, 4).sum(dim=1)


def tile_then_mean(x):
    """Column means of x tiled 4 times down the columns = x's column means."""
    return torch.tile(x, (4, 1)).mean(dim=0)


# --- logsumexp of a broadcast add ---

def logsumexp_outer_add(a, b):
    """logsumexp_j(a_i + b_j) = a_i + logsumexp(b): the n x m matrix is never needed."""
    return torch.logsumexp(a[:, None] + b[None, :], dim=1)


def log_sum_exp_outer_add(a, b):
    """log(sum_j exp(a_i + b_j)) written out = a_i + logsumexp(b)."""
    return torch.log(torch.exp(a.unsqueeze(1) + b.unsqueeze(0)).sum(dim=1))


# --- sort then a reduction ---

def sort_then_sum(x):
    """Row sums of the sorted rows = x's row sums: sorting only permutes the summed elements."""
    return torch.sort(x, dim=-1).values.sum(dim=-1)


def sort_descending_then_mean(x):
    """Column means of the columns sorted in descending order = x's column means."""
    return x.sort(dim=0, descending=True)[0].mean(dim=0)


# ====================================================================================================
# structure built from a mask
# ====================================================================================================

# --- prefix sums written as a triangular product ---

def tril_ones_prefix_sum(x):
    """tril(ones) X = the prefix sums of X's rows: a cumulative sum, not an n x n product."""
    n = x.shape[0]
    return torch.tril(torch.ones(n, n)) @ x


def causal_masked_fill_prefix_sum(x):
    """ones with the future masked out (masked_fill of triu) times X, batched = cumsum over the sequence."""
    n = x.shape[1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return torch.ones(n, n).masked_fill(future, 0.0) @ x


def einsum_tril_prefix_sum(x):
    """einsum('ij,bjd->bid', tril(ones), X) = cumsum of X over the sequence."""
    n = x.shape[1]
    return torch.einsum("ij,bjd->bid", torch.tril(torch.ones(n, n)), x)


# --- running means written as a triangular product ---

def tril_running_mean(x):
    """(tril(ones) / row counts) X = the running mean of X's rows: a cumulative sum divided by 1..n."""
    n = x.shape[0]
    return (torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1).unsqueeze(1)) @ x


def where_running_mean(x):
    """where(j <= i, 1 / (i + 1), 0) X = cumsum(X) / (1..n): a running mean."""
    i = torch.arange(x.shape[0])
    weights = torch.where(i[:, None] >= i[None, :], 1.0 / (i[:, None] + 1), 0.0)
    return weights @ x


# --- an identity mask before a product: a row scaling ---

def where_eye_matmul(a, y):
    """where(I, A, 0) Y = diag(A) scaling the rows of Y: the mask keeps only A's diagonal."""
    return torch.where(torch.eye(a.shape[0], dtype=torch.bool), a, 0.0) @ y


def eye_mask_multiply_matmul(a, y):
    """(A * I) Y = diag(A) scaling the rows of Y."""
    return (a * torch.eye(a.shape[0])) @ y


def masked_fill_off_diagonal_matmul(a, y):
    """A with the off-diagonal masked to 0 (masked_fill), times Y = diag(A) scaling the rows of Y."""
    off = ~torch.eye(a.shape[0], dtype=torch.bool)
    return a.masked_fill(off, 0.0) @ y


# --- a tridiagonal band mask before a product ---

def band_multiply_matmul(a, x):
    """(A * band(|i - j| <= 1)) X = three diagonals of A scaling X's rows, shifted: O(n d), not O(n^2 d)."""
    n = a.shape[0]
    return (a * torch.ones(n, n).triu(-1).tril(1)) @ x


def band_where_matmul(a, x):
    """where(|i - j| <= 1, A, 0) X = three diagonals of A scaling X's rows, shifted."""
    i = torch.arange(a.shape[0])
    return torch.where((i[:, None] - i[None, :]).abs() <= 1, a, 0.0) @ x


def _tridiagonal_hand(a, x):
    below, above = a.diagonal(-1)[:, None] * x[:-1], a.diagonal(1)[:, None] * x[1:]
    return a.diagonal()[:, None] * x + F.pad(below, (0, 0, 1, 0)) + F.pad(above, (0, 0, 0, 1))


# --- a sliding-window sum written as a banded product ---

WINDOW = 4  # the sliding window's length, in rows


def band_ones_window_sum(x):
    """band(ones, the last WINDOW rows) X = a causal sliding-window sum of X's rows: O(n d w), not O(n^2 d)."""
    n = x.shape[0]
    return torch.ones(n, n).tril().triu(-(WINDOW - 1)) @ x


def arange_mask_window_sum(x):
    """(0 <= i - j < WINDOW) as a float matrix times X = a causal sliding-window sum of X's rows."""
    i = torch.arange(x.shape[0])
    lag = i[:, None] - i[None, :]
    return ((lag >= 0) & (lag < WINDOW)).to(x.dtype) @ x


def _window_sum_hand(x):
    return F.pad(x, (0, 0, WINDOW - 1, 0)).unfold(0, WINDOW, 1).sum(dim=-1)


# --- a diagonal extracted by masking ---

def eye_mask_row_sums(x):
    """Row sums of X * I = X's diagonal."""
    return (x * torch.eye(x.shape[0])).sum(dim=1)


def where_eye_total(x):
    """Sum of where(I, X, 0) = trace(X)."""
    return torch.where(torch.eye(x.shape[0], dtype=torch.bool), x, 0.0).sum()


# --- sums over pairs from a triangular mask of a Gram matrix ---

def triu_gram_pair_sum(x):
    """Sum over pairs i < j of x_i . x_j (triu of X X^T) = (|X's column sums|^2 - |X|^2) / 2: no n x n product."""
    return torch.triu(x @ x.mT, diagonal=1).sum()


def masked_fill_gram_pair_sum(x):
    """X X^T with the lower triangle and diagonal masked to 0, summed = (|X's column sums|^2 - |X|^2) / 2."""
    n = x.shape[0]
    return (x @ x.mT).masked_fill(torch.ones(n, n, dtype=torch.bool).tril(), 0.0).sum()


# ====================================================================================================
# reductions of broadcasts
# ====================================================================================================

# --- a matrix product written as a broadcast ---

def broadcast_matmul_last(a, b):
    """(a[:, None, :] * b[None, :, :]).sum(-1) = A B^T: a matrix product, not an m x n x k tensor."""
    return (a[:, None, :] * b[None, :, :]).sum(-1)


def broadcast_matmul_middle(a, b):
    """(A[:, :, None] * B[None]).sum(1) = A B."""
    return (a.unsqueeze(2) * b.unsqueeze(0)).sum(dim=1)


# --- the total of a batched outer product ---

def outer_product_total(x, y):
    """(x[:, :, None] * y[:, None, :]).sum((1, 2)) = sum(x) sum(y) per batch row."""
    return (x.unsqueeze(2) * y.unsqueeze(1)).sum((1, 2))


def bmm_outer_total(x, y):
    """bmm(x as columns, y as rows) summed over both = sum(x) sum(y) per batch row."""
    return torch.bmm(x.unsqueeze(2), y.unsqueeze(1)).sum(dim=(1, 2))


# --- the square of an outer sum, reduced ---

def outer_sum_square_total(u, v):
    """sum_ij (u_i + v_j)^2 = m |u|^2 + n |v|^2 + 2 sum(u) sum(v)."""
    return ((u[:, None] + v[None, :]) ** 2).sum()


def outer_sum_square_rows(u, v):
    """sum_j (u_i + v_j)^2 = m u_i^2 + 2 u_i sum(v) + |v|^2."""
    return (u.unsqueeze(1) + v).pow(2).sum(dim=1)


# --- a weighted mean written as a broadcast ---

def broadcast_weighted_mean(x, w):
    """(x[:, :, None] * W).mean(1) = x W / n: a matrix product."""
    return (x[:, :, None] * w).mean(1)


def expand_weighted_sum(x, w):
    """(x expanded over W's columns * W).sum(1) = x W."""
    return (x.unsqueeze(-1).expand(-1, -1, w.shape[1]) * w.unsqueeze(0)).sum(dim=1)


# --- pairwise squared distances ---

def broadcast_sq_distances(a, b):
    """|a_i - b_j|^2 by broadcasting = |a_i|^2 + |b_j|^2 - 2 a_i . b_j: a matrix product, no m x n x d tensor."""
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def broadcast_distances(a, b):
    """|a_i - b_j| by broadcasting = sqrt(|a_i|^2 + |b_j|^2 - 2 a_i . b_j)."""
    return (a.unsqueeze(1) - b.unsqueeze(0)).norm(dim=-1)


def _sq_distances_hand(a, b):
    return a.square().sum(-1, keepdim=True) + b.square().sum(-1) - 2 * a @ b.mT


# --- the maximum of a broadcast add ---

def broadcast_add_max(x, b):
    """max_j (x_ij + b_k) = max_j x_ij + b_k: the max ignores a term constant along its dimension."""
    return (x[:, :, None] + b[None, None, :]).amax(dim=1)


def broadcast_add_torch_max(x, b):
    """torch.max(x[:, :, None] + b, dim=1).values = x's row maxima plus b."""
    return torch.max(x.unsqueeze(-1) + b, dim=1).values


# ====================================================================================================
# products behind views
# ====================================================================================================

# --- a block-diagonal weight: a grouped product ---

def block_diag_shared_matmul(x, w):
    """X block_diag(W, ..., W) = W applied to each group of X's columns: one product with reshapes."""
    h = x.shape[1] // w.shape[0]
    return x @ torch.block_diag(*[w] * h)


def block_diag_grouped_matmul(x, w):
    """X block_diag(W_1, ..., W_h) = W_g applied to group g of X's columns: one batched product."""
    return x @ torch.block_diag(*w.unbind(0))


def _block_diag_grouped_hand(x, w):
    h, d, k = w.shape
    return (x.reshape(-1, h, d).transpose(0, 1) @ w).transpose(0, 1).reshape(-1, h * k)


# --- a shared weight across a batch, then a batch sum ---

def bmm_expand_batch_sum(x, w):
    """sum_b bmm(X_b, W expanded) = (sum_b X_b) W: one small product instead of b."""
    return torch.bmm(x, w.expand(x.shape[0], -1, -1)).sum(0)


def einsum_batch_sum(x, w):
    """einsum('bij,jk->bik', X, W) summed over b = (sum_b X_b) W."""
    return torch.einsum("bij,jk->bik", x, w).sum(dim=0)


# --- a permuted product, reassociable ---

def permuted_product_chain(a, b, c):
    """(A B)^T C via permute, batched = B^T (A^T C): thin products only."""
    return (a @ b).permute(0, 2, 1) @ c


def transposed_product_chain(a, b, c):
    """(A B).t() C = B^T (A^T C): thin products only."""
    return (a @ b).t() @ c


# --- heads split by reshape, then summed through a second product ---

def head_reshape_chain_sum(x, w1, w2):
    """sum_h (X W1_h) W2, heads split by reshape and transpose = X ((sum_h W1_h) W2)."""
    n, r = x.shape[0], w2.shape[0]
    heads = (x @ w1).reshape(n, -1, r).transpose(0, 1)
    return (heads @ w2).sum(0)


def head_einsum_chain_sum(x, w1, w2):
    """einsum('hnr,rk->nk') of heads split by view and permute = X ((sum_h W1_h) W2)."""
    n, r = x.shape[0], w2.shape[0]
    return torch.einsum("hnr,rk->nk", (x @ w1).view(n, -1, r).permute(1, 0, 2), w2)


# --- heads split, merged straight back, then projected ---

class HeadGainsSplitMerge(nn.Module):
    """Heads split by view and transpose, scaled per head, merged back and projected = one linear layer."""

    def __init__(self, d=256, heads=8, d_out=256):
        super().__init__()
        self.heads = heads
        self.q, self.o = nn.Linear(d, d), nn.Linear(d, d_out)
        self.gain = nn.Parameter(torch.randn(heads))

    def forward(self, x):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
        q = q * self.gain.view(1, self.heads, 1, 1)
        return self.o(q.transpose(1, 2).reshape(b, n, d))


def _head_gains_split_merge_hand(m):
    scale = m.gain.repeat_interleave(m.q.out_features // m.heads)
    weight = m.o.weight @ (scale[:, None] * m.q.weight)
    weight, bias = _frozen(weight, m.o.weight @ (scale * m.q.bias) + m.o.bias)
    return lambda x: F.linear(x, weight, bias)


HEADS = 8  # the heads of head_permute_merge_chain


def head_permute_merge_chain(x, wq, wo):
    """(X Wq) split into heads by permute, merged back by contiguous().view(), times Wo = X (Wq Wo)."""
    b, n, d = x.shape
    heads = (x @ wq).reshape(b, n, HEADS, d // HEADS).permute(0, 2, 1, 3)
    return heads.permute(0, 2, 1, 3).contiguous().view(b, n, d) @ wo


# --- a grouped output summed over its groups ---

GROUPS = 8  # output groups of grouped_output_sum and grouped_output_mean


def grouped_output_sum(x, w):
    """(X W) viewed as GROUPS groups and summed over them = X (W's groups summed): a product 1/GROUPS the size."""
    return (x @ w).view(x.shape[0], GROUPS, -1).sum(dim=1)


def grouped_output_mean(x, w):
    """(X W).unflatten into GROUPS groups, averaged over them = X (W's groups averaged)."""
    return (x @ w).unflatten(-1, (GROUPS, -1)).mean(dim=-2)


# ====================================================================================================
# more: shift invariance and norms
# ====================================================================================================

# --- softmax is invariant to a per-row shift ---

def softmax_minus_row_max(x):
    """softmax(x - rowmax(x)) = softmax(x): the stabilising shift by hand is already inside softmax."""
    return torch.softmax(x - x.amax(dim=-1, keepdim=True), dim=-1)


def softmax_plus_row_bias(x, c):
    """softmax(x + c) with c constant along each row = softmax(x)."""
    return F.softmax(x + c, dim=-1)


# --- the Frobenius norm of a low-rank product ---

def low_rank_product_sq_norm(a, b):
    """|A B|_F^2 for a rank-r product = sum((A^T A) * (B B^T)): r x r Gram matrices, no n x m product."""
    return (a @ b).square().sum()


def low_rank_product_norm(a, b):
    """torch.linalg.norm(A B) = sqrt(sum((A^T A) * (B B^T)))."""
    return torch.linalg.norm(a @ b)


# ====================================================================================================
# scans and reversals through reductions and products (added with rule synthesis over them, issue 42)
# ====================================================================================================

# --- the mean of running sums: a batch's mean CDF ---

def mean_of_running_sums(p):
    """The batch mean of each row's running sums (a mean CDF) = the running sums of the batch mean."""
    return p.cumsum(dim=-1).mean(dim=0)


def batch_total_of_running_sums(p):
    """torch.cumsum(p, 1).sum(0) = the running sums of p's column totals: one scan of a row, not of p."""
    return torch.cumsum(p, 1).sum(0)


# --- running sums projected by a linear layer ---

def running_sums_projected(h, w):
    """(running sums of h down the sequence) W = running sums of h W: the scan on the narrow side."""
    return h.cumsum(dim=1) @ w


def running_sums_of_projection(x, w):
    """torch.cumsum(x W, -1) = x (W's running sums along its columns): the scan moves to the weight."""
    return torch.cumsum(x @ w, dim=-1)


# --- a reversal through a product ---

def reversed_window_filter(x, w):
    """Time-reversed windows times a filter bank = the windows times the bank reversed: no copy of x."""
    return x.flip(-1) @ w


def reversed_columns_projected(x, w):
    """W^T (x with its columns reversed) = (W^T x) with its columns reversed: the flip of the 32-row product."""
    return w.T @ torch.flip(x, [-1])


# ====================================================================================================
# the suite: family -> its spellings (programs with their twins), grouped by class
# ====================================================================================================

FAMILIES: dict[str, list[Twin]] = {
    # opaque ops with plain algebra
    "diag_row_scaling": [
        _fn(diag_row_scaling, lambda v, x: v[:, None] * x, [(1024,), (1024, 256)], [(8,), (8, 4)]),
        _fn(eye_row_scaling, lambda v, x: v[:, None] * x, [(1024,), (1024, 256)], [(8,), (8, 4)]),
        _fn(diag_embed_row_scaling, lambda v, x: v.unsqueeze(-1) * x, [(8, 384), (8, 384, 256)],
            [(2, 8), (2, 8, 4)]),
    ],
    "diag_col_scaling": [
        _fn(diag_col_scaling, lambda x, v: x * v, [(256, 1024), (1024,)], [(4, 8), (8,)]),
        _fn(eye_col_scaling, lambda x, v: x * v, [(256, 1024), (1024,)], [(4, 8), (8,)]),
    ],
    "trace_of_product": [
        _fn(trace_of_product, lambda a, b: (a * b.mT).sum(), [(512, 1024), (1024, 512)], [(6, 8), (8, 6)]),
        _fn(diagonal_sum_of_product, lambda a, b: (a * b.mT).sum(), [(512, 1024), (1024, 512)],
            [(6, 8), (8, 6)]),
    ],
    "outer_matmul": [
        _fn(torch_outer_matmul, lambda u, v, x: torch.outer(u, v @ x), [(1024,), (1024,), (1024, 256)],
            [(6,), (8,), (8, 4)]),
        _fn(einsum_outer_matmul, lambda u, v, x: torch.outer(u, v @ x), [(1024,), (1024,), (1024, 256)],
            [(6,), (8,), (8, 4)]),
    ],
    "kron_identity": [
        _fn(kron_identity_left, lambda a, x: (a @ x.reshape(-1, a.shape[0], x.shape[1])).reshape(x.shape),
            [(256, 256), (2048, 64)], [(4, 4), (12, 3)]),
        _fn(kron_identity_right, lambda x, a: (a.mT @ x.reshape(x.shape[0], a.shape[0], -1)).reshape(x.shape),
            [(64, 2048), (256, 256)], [(3, 12), (4, 4)]),
    ],
    "cumsum_difference": [
        _fn(cumsum_then_difference, lambda x: x[:, 1:], [(4096, 1024)], [(4, 8)]),
        _fn(cumsum_then_diff, lambda x: x[..., 1:], [(4096, 1024)], [(4, 8)]),
    ],
    "double_flip": [
        _fn(double_flip_add, lambda x, y: x + y, [(4096, 1024)] * 2, [(4, 8)] * 2),
        _fn(flip_around_elementwise, torch.tanh, [(2048, 1024)], [(4, 8)]),
    ],
    "roll_reduction": [
        _fn(roll_then_sum, lambda x: x.sum(dim=1), [(4096, 1024)], [(4, 8)]),
        _fn(rolled_dot, lambda x, y: (x * y).sum(-1), [(4096, 1024)] * 2, [(4, 8)] * 2),
    ],
    "repeat_reduction": [
        _fn(repeat_then_sum, lambda x: 4 * x.sum(dim=1), [(4096, 512)], [(4, 8)]),
        _fn(tile_then_mean, lambda x: x.mean(dim=0), [(1024, 2048)], [(4, 8)]),
    ],
    "logsumexp_broadcast_add": [
        _fn(logsumexp_outer_add, lambda a, b: a + torch.logsumexp(b, dim=0), [(2048,), (2048,)], [(4,), (8,)]),
        _fn(log_sum_exp_outer_add, lambda a, b: a + torch.logsumexp(b, dim=0), [(2048,), (2048,)],
            [(4,), (8,)]),
    ],
    "sort_reduction": [
        _fn(sort_then_sum, lambda x: x.sum(dim=-1), [(256, 1024)], [(4, 8)]),
        _fn(sort_descending_then_mean, lambda x: x.mean(dim=0), [(512, 256)], [(8, 4)]),
    ],
    # structure built from a mask
    "prefix_sum_product": [
        _fn(tril_ones_prefix_sum, lambda x: x.cumsum(dim=0), [(1024, 256)], [(8, 4)]),
        _fn(causal_masked_fill_prefix_sum, lambda x: x.cumsum(dim=1), [(4, 512, 256)], [(2, 8, 4)]),
        _fn(einsum_tril_prefix_sum, lambda x: x.cumsum(dim=1), [(4, 512, 256)], [(2, 8, 4)]),
    ],
    "running_mean_product": [
        _fn(tril_running_mean, lambda x: x.cumsum(dim=0) / torch.arange(1, x.shape[0] + 1).unsqueeze(1),
            [(1024, 256)], [(8, 4)]),
        _fn(where_running_mean, lambda x: x.cumsum(dim=0) / torch.arange(1, x.shape[0] + 1).unsqueeze(1),
            [(1024, 256)], [(8, 4)]),
    ],
    "identity_mask_matmul": [
        _fn(where_eye_matmul, lambda a, y: a.diagonal()[:, None] * y, [(1024, 1024), (1024, 256)],
            [(8, 8), (8, 4)]),
        _fn(eye_mask_multiply_matmul, lambda a, y: a.diagonal()[:, None] * y, [(1024, 1024), (1024, 256)],
            [(8, 8), (8, 4)]),
        _fn(masked_fill_off_diagonal_matmul, lambda a, y: a.diagonal()[:, None] * y,
            [(1024, 1024), (1024, 256)], [(8, 8), (8, 4)]),
    ],
    "band_mask_matmul": [
        _fn(band_multiply_matmul, _tridiagonal_hand, [(1024, 1024), (1024, 256)], [(8, 8), (8, 4)]),
        _fn(band_where_matmul, _tridiagonal_hand, [(1024, 1024), (1024, 256)], [(8, 8), (8, 4)]),
    ],
    "window_sum_product": [
        _fn(band_ones_window_sum, _window_sum_hand, [(1024, 256)], [(8, 4)]),
        _fn(arange_mask_window_sum, _window_sum_hand, [(1024, 256)], [(8, 4)]),
    ],
    "masked_diagonal": [
        _fn(eye_mask_row_sums, lambda x: x.diagonal(), [(2048, 2048)], [(8, 8)]),
        _fn(where_eye_total, torch.trace, [(2048, 2048)], [(8, 8)]),
    ],
    "gram_pair_sum": [
        _fn(triu_gram_pair_sum, lambda x: (x.sum(dim=0).square().sum() - x.square().sum()) / 2, [(1024, 128)],
            [(8, 4)]),
        _fn(masked_fill_gram_pair_sum, lambda x: (x.sum(dim=0).square().sum() - x.square().sum()) / 2,
            [(1024, 128)], [(8, 4)]),
    ],
    # reductions of broadcasts
    "broadcast_matmul": [
        _fn(broadcast_matmul_last, lambda a, b: a @ b.mT, [(128, 256), (256, 256)], [(4, 8), (6, 8)]),
        _fn(broadcast_matmul_middle, lambda a, b: a @ b, [(128, 256), (256, 256)], [(4, 8), (8, 6)]),
    ],
    "outer_product_total": [
        _fn(outer_product_total, lambda x, y: x.sum(dim=1) * y.sum(dim=1), [(128, 256)] * 2, [(4, 8), (4, 6)]),
        _fn(bmm_outer_total, lambda x, y: x.sum(dim=1) * y.sum(dim=1), [(128, 256)] * 2, [(4, 8), (4, 6)]),
    ],
    "outer_sum_square": [
        _fn(outer_sum_square_total, lambda u, v: v.shape[0] * u.square().sum() + u.shape[0] * v.square().sum()
            + 2 * u.sum() * v.sum(), [(4096,), (2048,)], [(4,), (8,)]),
        _fn(outer_sum_square_rows, lambda u, v: v.shape[0] * u.square() + 2 * u * v.sum() + v.square().sum(),
            [(4096,), (2048,)], [(4,), (8,)]),
    ],
    "broadcast_weighted_mean": [
        _fn(broadcast_weighted_mean, lambda x, w: x @ w / x.shape[1], [(64, 1024), (1024, 128)],
            [(4, 8), (8, 6)]),
        _fn(expand_weighted_sum, lambda x, w: x @ w, [(64, 1024), (1024, 128)], [(4, 8), (8, 6)]),
    ],
    "pairwise_distances": [
        _fn(broadcast_sq_distances, _sq_distances_hand, [(256, 64), (512, 64)], [(4, 3), (6, 3)]),
        _fn(broadcast_distances, lambda a, b: _sq_distances_hand(a, b).clamp_min(0).sqrt(),
            [(256, 64), (512, 64)], [(4, 3), (6, 3)]),
    ],
    "broadcast_add_max": [
        _fn(broadcast_add_max, lambda x, b: x.amax(dim=1, keepdim=True) + b, [(256, 256), (128,)],
            [(4, 8), (6,)]),
        _fn(broadcast_add_torch_max, lambda x, b: x.amax(dim=1, keepdim=True) + b, [(128, 256), (128,)],
            [(4, 8), (6,)]),
    ],
    # products behind views
    "block_diag_matmul": [
        _fn(block_diag_shared_matmul, lambda x, w: (x.reshape(x.shape[0], -1, w.shape[0]) @ w)
            .reshape(x.shape[0], -1), [(1024, 512), (64, 64)], [(4, 8), (2, 3)]),
        _fn(block_diag_grouped_matmul, _block_diag_grouped_hand, [(1024, 512), (8, 64, 64)],
            [(4, 8), (4, 2, 3)]),
    ],
    "shared_weight_batch_sum": [
        _fn(bmm_expand_batch_sum, lambda x, w: x.sum(dim=0) @ w, [(16, 256, 256), (256, 256)],
            [(2, 4, 8), (8, 6)]),
        _fn(einsum_batch_sum, lambda x, w: x.sum(dim=0) @ w, [(16, 256, 256), (256, 256)], [(2, 4, 8), (8, 6)]),
    ],
    "transposed_product_chain": [
        _fn(permuted_product_chain, lambda a, b, c: b.mT @ (a.mT @ c), [(8, 256, 256), (8, 256, 256), (256, 8)],
            [(2, 4, 6), (2, 6, 8), (4, 2)]),
        _fn(transposed_product_chain, lambda a, b, c: b.t() @ (a.t() @ c), [(512, 512), (512, 1024), (512, 8)],
            [(4, 6), (6, 8), (4, 2)]),
    ],
    "head_chain_sum": [
        _fn(head_reshape_chain_sum, lambda x, w1, w2: x @ (w1.reshape(w1.shape[0], -1, w2.shape[0]).sum(1) @ w2),
            [(2048, 256), (256, 512), (64, 64)], [(4, 8), (8, 6), (2, 3)]),
        _fn(head_einsum_chain_sum, lambda x, w1, w2: x @ (w1.reshape(w1.shape[0], -1, w2.shape[0]).sum(1) @ w2),
            [(2048, 256), (256, 512), (64, 64)], [(4, 8), (8, 6), (2, 3)]),
    ],
    "head_split_merge": [
        _mod(HeadGainsSplitMerge, _head_gains_split_merge_hand, ({}, [(8, 256, 256)]),
             ({"d": 16, "heads": 4, "d_out": 8}, [(2, 3, 16)])),
        _fn(head_permute_merge_chain, lambda x, wq, wo: x @ (wq @ wo), [(8, 256, 256), (256, 256), (256, 256)],
            [(2, 3, 16), (16, 16), (16, 8)]),
    ],
    "grouped_output_sum": [
        _fn(grouped_output_sum, lambda x, w: x @ w.view(w.shape[0], GROUPS, -1).sum(dim=1),
            [(2048, 256), (256, 512)], [(4, 6), (6, 16)]),
        _fn(grouped_output_mean, lambda x, w: x @ w.unflatten(-1, (GROUPS, -1)).mean(dim=-2),
            [(2048, 256), (256, 512)], [(4, 6), (6, 16)]),
    ],
    # more: shift invariance and norms
    "softmax_row_shift": [
        _fn(softmax_minus_row_max, lambda x: torch.softmax(x, dim=-1), [(4096, 1024)], [(4, 8)]),
        _fn(softmax_plus_row_bias, lambda x, c: torch.softmax(x, dim=-1), [(4096, 1024), (4096, 1)],
            [(4, 8), (4, 1)]),
    ],
    "low_rank_norm": [
        _fn(low_rank_product_sq_norm, lambda a, b: ((a.mT @ a) * (b @ b.mT)).sum(), [(2048, 32), (32, 2048)],
            [(8, 2), (2, 6)]),
        _fn(low_rank_product_norm, lambda a, b: ((a.mT @ a) * (b @ b.mT)).sum().sqrt(), [(1024, 64), (64, 1024)],
            [(8, 2), (2, 6)]),
    ],
    # scans and reversals through reductions and products
    "running_sums_reduced": [
        _fn(mean_of_running_sums, lambda p: p.mean(dim=0).cumsum(dim=-1), [(4096, 1024)], [(4, 8)]),
        _fn(batch_total_of_running_sums, lambda p: p.sum(0).cumsum(0), [(4096, 1024)], [(4, 8)]),
    ],
    "running_sums_projected": [
        _fn(running_sums_projected, lambda h, w: (h @ w).cumsum(dim=1), [(8, 512, 512), (512, 16)],
            [(2, 4, 8), (8, 3)]),
        _fn(running_sums_of_projection, lambda x, w: x @ w.cumsum(dim=-1), [(4096, 256), (256, 128)],
            [(4, 8), (8, 6)]),
    ],
    "reversed_product": [
        _fn(reversed_window_filter, lambda x, w: x @ w.flip(0), [(4096, 512), (512, 32)], [(4, 8), (8, 3)]),
        _fn(reversed_columns_projected, lambda x, w: (w.T @ x).flip(-1), [(512, 4096), (512, 32)],
            [(8, 4), (8, 3)]),
    ],
}

TWINS: list[Twin] = [twin for spellings in FAMILIES.values() for twin in spellings]

SUITE: dict[str, Program] = {p.name: p for p in (_program(t, t.full) for t in TWINS)}  # benchmark sizes
SMALL: dict[str, Program] = {p.name: p for p in (_program(t, t.small) for t in TWINS)}  # for the correctness test
