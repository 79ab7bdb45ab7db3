"""The benchmark suite: programs EqiForge should speed up, and programs it should leave alone.

Each ``Program`` pairs a PyTorch program with the rewrite a person would write by hand. Where
``algebraic_win`` is set, the hand rewrite uses algebra (reassociation, distributivity, sums through
products, folded weights, ...) and is the yardstick: EqiForge should find the same rewrite by itself. Where it
is not set, the hand rewrite is the program itself and the yardstick is eager PyTorch: EqiForge should not
make it slower. Sizes are CPU-friendly (an eager run takes ~0.2-20 ms on 2 cores).

All inputs are standard-normal tensors, so a runner can draw fresh ones of the same shapes.
Modules are built under a fixed seed and put in eval mode; a hand rewrite gets the built module so it can
read (and pre-combine) its weights, as a person folding weights by hand would.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from eqiforge import examples


@dataclass(frozen=True)
class Program:
    name: str
    doc: str
    algebraic_win: bool
    factory: Callable[[], tuple[Callable, tuple[torch.Tensor, ...]]]  # () -> (program, example inputs)
    hand: Callable[[Callable], Callable]  # the built program -> its hand-optimised rewrite

    def make(self) -> tuple[Callable, tuple[torch.Tensor, ...]]:
        """(program, example inputs), built under a fixed seed; modules come back in eval mode."""
        torch.manual_seed(0)
        program, inputs = self.factory()
        return (program.eval() if isinstance(program, nn.Module) else program), inputs


def _randn(*shapes):
    return tuple(torch.randn(*s) for s in shapes)


def _function(fn: Callable, hand_fn: Callable, *shapes, algebraic_win: bool = True) -> Program:
    """A program that is a plain function of standard-normal inputs of ``shapes``."""
    return Program(fn.__name__, fn.__doc__, algebraic_win, lambda: (fn, _randn(*shapes)), lambda _: hand_fn)


def _module(name: str, build: Callable[[], nn.Module], hand: Callable[[nn.Module], Callable], *shapes,
            algebraic_win: bool = True, doc: str | None = None) -> Program:
    """A program that is an nn.Module of standard-normal inputs of ``shapes``; ``doc`` defaults to build's."""
    return Program(name, doc or build.__doc__, algebraic_win, lambda: (build(), _randn(*shapes)), hand)


# --- algebra matters: input-only functions and their hand rewrites ---

def matmul_chain(a, b, c, x):
    """((A B) C) x, written left to right; right to left is three matrix-vector products."""
    return a @ b @ c @ x


def row_sums(a, b):
    """(A B) summed over its columns = A (B 1): a matrix-vector product instead of a matrix product."""
    return (a @ b).sum(dim=-1)


def col_means(a, b):
    """Mean over the rows of A B = (mean of the rows of A) B."""
    return (a @ b).mean(dim=0)


def distribute_matmul(a, x, y):
    """A X + A Y = A (X + Y): one matrix product instead of two."""
    return a @ x + a @ y


def distribute_scale(x, y, c):
    """x c + y c = (x + y) c with c a broadcast row: one product instead of two."""
    return x * c + y * c


def shared_factor_sum(x1, x2, x3, x4, w):
    """A sum of products sharing their right factor: (x1 + x2 + x3 + x4) W, one product instead of four."""
    return x1 @ w + x2 @ w + x3 @ w + x4 @ w


def scale_small_side(a, b):
    """(A B) * 0.5 with A B large and B small: scaling B instead touches 1/128 as many elements."""
    return (a @ b) * 0.5


def broadcast_bias_mean(x, b):
    """Mean over the features of x + b with b a bias broadcast over the rows = mean(x) + mean(b): the bias's
    mean once, where its broadcast was reduced at full size (issue 25's miss, rules/reduction.egg)."""
    return (x + b).mean(dim=-1)


def transpose_cancel(a, b, x):
    """((B^T A^T)^T) X: the transposes cancel to (A B) X, which reassociates to A (B X) for a thin X."""
    return (b.mT @ a.mT).mT @ x


# --- algebra matters: modules whose weights a person would pre-combine ---

class QKVSum(nn.Module):
    """q + k + v of three projections of one input = one projection by the summed weights."""

    def __init__(self, d=256):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return self.q(x) + self.k(x) + self.v(x)


class QKVConcat(nn.Module):
    """[q, k, v] of three projections of one input = one projection by the concatenated weights."""

    def __init__(self, d=256):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)


def linear_linear():
    """W2 (W1 x + b1) + b2 with no activation between = (W2 W1) x + (W2 b1 + b2): one small product."""
    return nn.Sequential(nn.Linear(256, 1024), nn.Linear(1024, 256))


def _linear(weight, bias):
    """A hand rewrite's single projection by pre-combined (detached, constant) weights."""
    weight, bias = weight.detach().clone(), bias.detach().clone()
    return lambda x: F.linear(x, weight, bias)


def _qkv_sum_hand(m):
    return _linear(m.q.weight + m.k.weight + m.v.weight, m.q.bias + m.k.bias + m.v.bias)


def _qkv_concat_hand(m):
    return _linear(torch.cat([m.q.weight, m.k.weight, m.v.weight]), torch.cat([m.q.bias, m.k.bias, m.v.bias]))


def _linear_linear_hand(m):
    first, second = m
    return _linear(second.weight @ first.weight, second.weight @ first.bias + second.bias)


def _low_rank_hand(m):
    u, v = m.u.detach().clone(), m.v.detach().clone()
    return lambda x: (x @ u) @ v


# --- algebra should not matter: the program itself is the yardstick ---

class LayerNormSoftmax(nn.Module):
    """LayerNorm then softmax over the features: normalisation only, no algebra to exploit."""

    def __init__(self, d=1024):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return torch.softmax(self.ln(x), dim=-1)


def elementwise(x, y):
    """A chain of elementwise functions: nothing to reassociate or factor."""
    return torch.tanh(x) * torch.sigmoid(y) + torch.exp(-x * x) - torch.relu(y) * 0.5


def _itself(program):
    return program


PROGRAMS: dict[str, Program] = {p.name: p for p in [
    _function(matmul_chain, lambda a, b, c, x: a @ (b @ (c @ x)), *[(768, 768)] * 3, (768,)),
    _function(row_sums, lambda a, b: a @ b.sum(dim=-1), (512, 1024), (1024, 1024)),
    _function(col_means, lambda a, b: a.mean(dim=0) @ b, (1024, 512), (512, 1024)),
    _function(distribute_matmul, lambda a, x, y: a @ (x + y), *[(384, 384)] * 3),
    _function(distribute_scale, lambda x, y, c: (x + y) * c, (1024, 1024), (1024, 1024), (1024,)),
    _function(shared_factor_sum, lambda x1, x2, x3, x4, w: (x1 + x2 + x3 + x4) @ w, *[(256, 512)] * 4, (512, 512)),
    _function(scale_small_side, lambda a, b: a @ (b * 0.5), (2048, 16), (16, 1024)),
    _function(transpose_cancel, lambda a, b, x: a @ (b @ x), (768, 768), (768, 768), (768, 4)),
    _function(broadcast_bias_mean, lambda x, b: x.mean(dim=-1) + b.mean(), (4096, 1024), (1024,)),
    _module("low_rank", lambda: examples.LowRank(n=1024, r=16), _low_rank_hand, (512, 1024),
            doc=examples.LowRank.__doc__),
    _module("qkv_sum", QKVSum, _qkv_sum_hand, (512, 256)),
    _module("qkv_concat", QKVConcat, _qkv_concat_hand, (512, 256)),
    _module("linear_linear", linear_linear, _linear_linear_hand, (1024, 256)),
    _module("mlp_gelu", lambda: examples.MLP(d=256, hidden=1024), _itself, (256, 256), algebraic_win=False,
            doc="Linear, GELU, Linear: the activation blocks any algebra across the layers."),
    _module("encoder_layer", examples.EncoderLayer, _itself, (2, 64, 256), algebraic_win=False),
    _module("layernorm_softmax", LayerNormSoftmax, _itself, (1024, 1024), algebraic_win=False),
    _function(elementwise, elementwise, (512, 1024), (512, 1024), algebraic_win=False),
]}
