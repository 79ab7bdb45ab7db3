"""Deep programs are right (issue 10): egglog 13.2 once stored a wrong child from the eleventh layer on.
Residual attention layers and Llama-style blocks (RMSNorm, rotary embeddings, grouped-query causal
attention, SwiGLU) at 12, 24 and 48 layers match eager, with the default rules and with none. The plan
check is off here so that a wrong plan shows instead of being replaced."""
import functools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from eqiforge import frontend
from eqiforge.pipeline.report import StageTimer
from eqiforge.pipeline.compile import compile_graph
from eqiforge.pipeline.options import Options
from test_end_to_end import assert_close

#: 12 layers reach the eleventh layer, where egglog went wrong; 24 and 48 are the slow tier
DEPTHS = [12, pytest.param(24, marks=pytest.mark.slow), pytest.param(48, marks=pytest.mark.slow)]
RULES = {"default-rules": None, "no-rules": []}


def residual_attention(layers: int):
    def program(x, w):
        for _ in range(layers):
            h = F.layer_norm(x, (16,))
            a = torch.softmax(h @ h.mT / 4, -1) @ h
            x = x + torch.relu(a @ w) * 0.1
        return x
    gen = torch.Generator().manual_seed(layers)
    return program, (torch.randn(2, 8, 16, generator=gen), torch.randn(16, 16, generator=gen))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.rand(dim) + 0.5), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2, seq=8):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv_freq).repeat(1, 2)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def heads_of(self, proj, h, n):
        b, s, _ = h.shape
        return proj(h).view(b, s, n, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, s, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (self.heads_of(p, h, n) for p, n in
                   ((self.q, self.heads), (self.k, self.kv_heads), (self.v, self.kv_heads)))
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def llama(layers: int):
    torch.manual_seed(layers)
    model = nn.Sequential(*[LlamaBlock() for _ in range(layers)]).eval()
    return model, (torch.randn(2, 8, 32),)


@functools.lru_cache(maxsize=1)
def captured(build, layers):
    """(program, inputs, captured program): capturing 48 layers takes longer than optimizing them, so both
    rule configurations optimize one capture."""
    program, inputs = build(layers)
    return program, inputs, frontend.capture(program, inputs)


@pytest.mark.parametrize("rules", RULES.values(), ids=RULES.keys())
@pytest.mark.parametrize("layers", DEPTHS)
@pytest.mark.parametrize("build", [residual_attention, llama], ids=["residual-attention", "llama"])
def test_deep_program_matches_eager(build, layers, rules):
    program, inputs, cap = captured(build, layers)
    opts = Options.of(rules=None if rules is None else tuple(rules), validate=False)
    opt = compile_graph(cap.graph, cap.input_names, cap.out_spec, opts, StageTimer(), examples=list(inputs))
    with torch.no_grad():
        assert_close(opt(*inputs), program(*inputs), rtol=1e-5)
