"""Built-in example programs: ``EXAMPLES[name]()`` returns ``(module, example_inputs)``.

Used by ``eqiforge optimize --example NAME``, the tests and the benchmarks. Sizes are small enough for a
CPU; ``bert_encoder`` is the 12-layer BERT-base shape used for the optimizer-speed target.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .errors import EqiforgeError


class MatmulChain(nn.Module):
    """((A B) C) x: written left to right, cheapest right to left (a vector at the end)."""

    def forward(self, a, b, c, x):
        return a @ b @ c @ x


class LowRank(nn.Module):
    """x @ (U V): a low-rank weight materialised before use; x @ U @ V is r/n of the work."""

    def __init__(self, n=512, r=16):
        super().__init__()
        self.u = nn.Parameter(torch.randn(n, r) / math.sqrt(n))
        self.v = nn.Parameter(torch.randn(r, n) / math.sqrt(r))

    def forward(self, x):
        return x @ (self.u @ self.v)


class MLP(nn.Module):
    def __init__(self, d=256, hidden=1024, layers=2):
        super().__init__()
        dims = [d] + [hidden] * (layers - 1) + [d]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return x


class EncoderLayer(nn.Module):
    """A post-norm transformer encoder layer written out (attention as matmul/softmax/matmul)."""

    def __init__(self, d=256, heads=4, ffn=1024):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def attention(self, x):
        b, s, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        ctx = torch.softmax(scores, dim=-1) @ v
        return self.o(ctx.transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = self.ln1(x + self.attention(x))
        return self.ln2(x + self.down(F.gelu(self.up(x))))


class Encoder(nn.Module):
    def __init__(self, layers=12, d=768, heads=12, ffn=3072):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ffn) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class RowSums(nn.Module):
    """Sum over the output features of a product: (A B) 1 = A (B 1)."""

    def forward(self, a, b):
        return (a @ b).sum(dim=-1)


class MixedOps(nn.Module):
    """Known ops around ops EqiForge does not model (cumsum, sort): they run in PyTorch."""

    def __init__(self, d=64):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) / 8)

    def forward(self, x):
        y = torch.cumsum(x @ self.w, dim=-1)
        top, _ = torch.sort(y, dim=-1)
        return torch.relu(top) * 2.0 + y, y.mean(dim=0)


class Attention(nn.Module):
    """PyTorch's fused scaled_dot_product_attention (flash on a GPU): EqiForge's attention kernel against it."""

    def __init__(self, causal: bool = False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


def greedy(step, prompt: torch.Tensor, tokens: int) -> torch.Tensor:
    """``tokens`` greedy tokens after ``prompt`` from a causal language model ``step`` (a transformers model,
    or what ``eqiforge.optimize`` made of one): the prompt once, then one token at a time with the cache."""
    out, chosen = step(prompt), []
    while True:
        chosen.append(out.logits[:, -1:].argmax(-1))
        if len(chosen) == tokens:
            return torch.cat(chosen, 1)
        out = step(chosen[-1], cache=out.cache)


def _rand(*shape):
    return torch.randn(*shape)


EXAMPLES = {
    "matmul_chain": lambda: (MatmulChain(), (_rand(256, 256), _rand(256, 256), _rand(256, 256), _rand(256))),
    "low_rank": lambda: (LowRank(), (_rand(256, 512),)),
    "mlp": lambda: (MLP(), (_rand(64, 256),)),
    "transformer_layer": lambda: (EncoderLayer(), (_rand(2, 64, 256),)),
    "row_sums": lambda: (RowSums(), (_rand(256, 512), _rand(512, 512))),
    "mixed_ops": lambda: (MixedOps(), (_rand(32, 64),)),
    "attention": lambda: (Attention(causal=True), tuple(_rand(2, 4, 64, 32) for _ in range(3))),
    "bert_encoder": lambda: (Encoder(), (_rand(8, 128, 768),)),
}


def load(name: str):
    """(module in eval mode, example inputs) of a built-in example; clear error for an unknown name."""
    if name not in EXAMPLES:
        raise EqiforgeError(f"unknown example {name!r}; built-in examples: {sorted(EXAMPLES)}")
    torch.manual_seed(0)
    module, inputs = EXAMPLES[name]()
    return module.eval(), inputs


def add_arguments(parser) -> None:
    """The command line's way to name a program: a file (``frontend.targets.load_target``) or an example."""
    parser.add_argument("target", nargs="?", help="path.py (Model + get_inputs) or path.py:factory")
    parser.add_argument("--example", help="a built-in example instead of a file (see `eqiforge examples`)")
