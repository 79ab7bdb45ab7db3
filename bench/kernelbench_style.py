"""The KernelBench-style suite: programs with nothing algebraic to find, where EqiForge must not get in the way.

The kind of program KernelBench collects, written here for EqiForge: single composites at realistic sizes
(softmax, norms, activations, logsumexp, cumsum), GEMMs with epilogue chains, norms, losses, small
attention and MLP blocks, conv blocks (ResNet-18's stem and stages among them), and a few plain externs.
None of them has an algebraic rewrite a person would write by hand, so every program's hand rewrite is the
program itself (``algebraic_win=False``) and the yardstick is eager PyTorch: EqiForge should be no more than
5% slower than eager on any of them (issue 12's acceptance).

Every program exists at two sizes with the same name: ``SUITE`` at benchmark size (an eager call takes
~0.2-20 ms on 2 cores, float32) and ``SMALL`` shrunk for the correctness test, so that test stays fast.
Inputs are standard normal, except integer ones: those are class labels, in [0, classes), and a runner
draws fresh ones in the range the example's labels span (``run_cpu.fresh``).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from programs import Program


def _itself(program):
    return program


def _randn(*shapes):
    return tuple(torch.randn(*s) for s in shapes)


# --- single composites: one PyTorch call (or one short formula), nothing else ---

def softmax(x):
    """torch.softmax over the last dim of a [rows, 4096] tensor."""
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    """torch.log_softmax over long rows (the issue's 0.35x case was [16, 196608])."""
    return torch.log_softmax(x, dim=1)


def gelu_erf(x):
    """F.gelu, the exact (erf) form."""
    return F.gelu(x)


def gelu_tanh(x):
    """F.gelu(approximate='tanh')."""
    return F.gelu(x, approximate="tanh")


def gelu_written_out(x):
    """The tanh GELU written out as a formula (as GPT-2 code does): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def silu(x):
    """F.silu."""
    return F.silu(x)


def swish_written_out(x):
    """x * sigmoid(x), SiLU as a formula."""
    return x * torch.sigmoid(x)


def softplus(x):
    """F.softplus (beta 1, threshold 20)."""
    return F.softplus(x)


def mish(x):
    """F.mish."""
    return F.mish(x)


def elu(x):
    """F.elu with alpha 1."""
    return F.elu(x, alpha=1.0)


def selu(x):
    """F.selu."""
    return F.selu(x)


def hardtanh(x):
    """F.hardtanh to [-0.5, 0.5]."""
    return F.hardtanh(x, min_val=-0.5, max_val=0.5)


def hardswish(x):
    """F.hardswish."""
    return F.hardswish(x)


def hardsigmoid(x):
    """F.hardsigmoid."""
    return F.hardsigmoid(x)


def leaky_relu(x):
    """F.leaky_relu with slope 0.01."""
    return F.leaky_relu(x, negative_slope=0.01)


def logsumexp(x):
    """torch.logsumexp over the last dim."""
    return torch.logsumexp(x, dim=-1)


def cumsum(x):
    """torch.cumsum along the rows: an extern and nothing else (the issue's 0.68x case)."""
    return torch.cumsum(x, dim=1)


# --- norms ---

class RMSNorm(nn.Module):
    """RMS norm written out (as LLaMA code does): x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, d=1024, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def l2_normalize(x):
    """F.normalize: every row divided by its L2 norm."""
    return F.normalize(x, p=2.0, dim=1)


def frobenius_normalize(x):
    """The whole tensor divided by its Frobenius norm (one global reduction, then a broadcast)."""
    return x / torch.norm(x, p="fro")


# --- GEMM + epilogue chains ---

class LinearReLU(nn.Module):
    """nn.Linear (bias) then ReLU."""

    def __init__(self, d_in=1024, d_out=1024):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.relu(self.fc(x))


class LinearGELU(nn.Module):
    """nn.Linear then exact GELU, a transformer MLP's first half."""

    def __init__(self, d_in=1024, d_out=1024):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return F.gelu(self.fc(x))


class LinearSigmoidScaleResidual(nn.Module):
    """y = Linear(x); y + 2 sigmoid(y): an epilogue that reads the GEMM's output twice."""

    def __init__(self, d_in=1024, d_out=1024, scale=2.0):
        super().__init__()
        self.fc, self.scale = nn.Linear(d_in, d_out), scale

    def forward(self, x):
        y = self.fc(x)
        return y + self.scale * torch.sigmoid(y)


class LinearResidualLayerNorm(nn.Module):
    """LayerNorm(x + Linear(x)): a post-norm residual block's projection half."""

    def __init__(self, d=1024):
        super().__init__()
        self.fc, self.ln = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x + self.fc(x))


def matmul_scale_softmax(a, b):
    """softmax((A B) / 8) over the last dim: attention scores without the attention."""
    return torch.softmax((a @ b) * 0.125, dim=-1)


class LinearClampLogsumexp(nn.Module):
    """Linear, clamp to [-2, 2], logsumexp over the features, then Mish on the [batch, 1] result."""

    def __init__(self, d_in=1024, d_out=1024):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        y = torch.clamp(self.fc(x), -2.0, 2.0)
        return F.mish(torch.logsumexp(y, dim=1, keepdim=True))


class LinearBiasHardswish(nn.Module):
    """A bias-free nn.Linear, a separate bias parameter added, then hardswish and a division by 2."""

    def __init__(self, d_in=1024, d_out=1024):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(0.1 * torch.randn(d_out))

    def forward(self, x):
        return F.hardswish(self.fc(x) + self.bias) / 2.0


def bmm_softmax_bmm(a, b, v):
    """Batched softmax(A B) V with no scaling or heads: two bmm's around a softmax."""
    return torch.bmm(torch.softmax(torch.bmm(a, b), dim=-1), v)


# --- losses (targets as inputs; integer inputs are class labels) ---

def cross_entropy(logits, labels):
    """F.cross_entropy of [batch, classes] logits against integer labels (mean reduction)."""
    return F.cross_entropy(logits, labels)


def nll_loss(logits, labels):
    """F.nll_loss of log_softmax'ed logits: cross entropy in two calls."""
    return F.nll_loss(F.log_softmax(logits, dim=1), labels)


def mse_loss(pred, target):
    """F.mse_loss (mean)."""
    return F.mse_loss(pred, target)


def smooth_l1_loss(pred, target):
    """F.smooth_l1_loss with beta 1 (Huber)."""
    return F.smooth_l1_loss(pred, target, beta=1.0)


def hinge_loss(pred, target):
    """mean(clamp(1 - pred * sign(target), min=0)): a hinge loss on ±1 labels made from the target's sign."""
    return torch.clamp(1.0 - pred * torch.sign(target), min=0.0).mean()


def kl_div_loss(pred, target):
    """F.kl_div(log_softmax(pred), softmax(target), reduction='batchmean')."""
    return F.kl_div(F.log_softmax(pred, dim=-1), F.softmax(target, dim=-1), reduction="batchmean")


def bce_with_logits(pred, target):
    """F.binary_cross_entropy_with_logits against sigmoid(target) as soft labels."""
    return F.binary_cross_entropy_with_logits(pred, torch.sigmoid(target))


def cosine_loss(a, b):
    """1 - mean cosine similarity of paired rows."""
    return 1.0 - F.cosine_similarity(a, b, dim=1).mean()


# --- small attention and MLP blocks ---

def sdpa(q, k, v):
    """F.scaled_dot_product_attention, [batch, heads, seq, head dim], no mask."""
    return F.scaled_dot_product_attention(q, k, v)


class CausalSelfAttention(nn.Module):
    """A GPT-style block's attention written out: fused QKV projection, heads, a causal mask from a tril
    buffer (masked_fill), softmax, output projection."""

    def __init__(self, d=256, heads=4, seq=128):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = torch.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class GPTBlock(nn.Module):
    """A minGPT block: LayerNorm, causal self-attention (written out, as above), residual; LayerNorm, MLP with
    GELU, residual."""

    def __init__(self, d=256, heads=4, seq=128):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class NetVLAD(nn.Module):
    """NetVLAD pooling of local descriptors: soft assignment to K clusters (a projection and a softmax),
    residuals to the cluster centres aggregated by the assignment, intra- and global L2 normalisation."""

    def __init__(self, d=128, clusters=32):
        super().__init__()
        self.assign = nn.Linear(d, clusters, bias=False)
        self.centres = nn.Parameter(torch.randn(clusters, d) * 0.1)

    def forward(self, x):  # [batch, descriptors, d]
        a = torch.softmax(self.assign(x), dim=-1)  # [b, n, k]
        vlad = a.transpose(1, 2) @ x - a.sum(1).unsqueeze(-1) * self.centres  # [b, k, d]
        vlad = F.normalize(vlad, dim=-1)
        return F.normalize(vlad.flatten(1), dim=-1)


class VisionAttention(nn.Module):
    """Self-attention over a feature map's pixels: [B, C, H, W] -> H*W tokens, nn.MultiheadAttention,
    residual and LayerNorm, back to [B, C, H, W]."""

    def __init__(self, c=128, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        out, _ = self.attn(tokens, tokens, tokens, need_weights=False)
        return self.norm(out + tokens).transpose(1, 2).reshape(b, c, h, w)


class SwiGLU(nn.Module):
    """A gated MLP (LLaMA's): down(silu(gate(x)) * up(x)), bias-free."""

    def __init__(self, d=512, hidden=1024):
        super().__init__()
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class PreNormMLP(nn.Module):
    """x + fc2(gelu_tanh(fc1(LayerNorm(x)))): a pre-norm transformer's MLP half with its residual."""

    def __init__(self, d=256, hidden=1024):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x)), approximate="tanh"))


# --- conv blocks (convolutions, pools and eval batch norms are IR ops; other norms decompose) ---

class ConvReLUBatchNorm(nn.Module):
    """Conv2d 3x3, ReLU, BatchNorm2d (eval: running statistics)."""

    def __init__(self, c_in=16, c_out=32):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out)
        with torch.no_grad():  # running statistics that are not the identity
            self.bn.running_mean.copy_(0.1 * torch.randn(c_out))
            self.bn.running_var.copy_(1.0 + 0.1 * torch.rand(c_out))

    def forward(self, x):
        return self.bn(torch.relu(self.conv(x)))


class ConvBiasTanh(nn.Module):
    """A bias-free Conv2d, a [C, 1, 1] bias parameter added, tanh, then a scale by 0.5."""

    def __init__(self, c_in=16, c_out=32):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bias = nn.Parameter(0.1 * torch.randn(c_out, 1, 1))

    def forward(self, x):
        return torch.tanh(self.conv(x) + self.bias) * 0.5


class ConvGELUMaxPool(nn.Module):
    """Conv2d, GELU, 2x2 max pool."""

    def __init__(self, c_in=16, c_out=32):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(F.gelu(self.conv(x)), 2)


class ConvGELUGlobalPool(nn.Module):
    """Conv2d, GELU, global average pool to one value per channel."""

    def __init__(self, c_in=16, c_out=32):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x):
        return F.gelu(self.conv(x)).mean(dim=(2, 3))


class ConvGroupNormSiLU(nn.Module):
    """Conv2d, GroupNorm(8 groups), SiLU: a diffusion U-Net's conv unit."""

    def __init__(self, c_in=16, c_out=32):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(8, c_out)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


class ConvPoolClassifier(nn.Module):
    """Conv2d, ReLU, global average pool, flatten, Linear: a small classifier head."""

    def __init__(self, c_in=16, c_out=64, classes=100):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(c_in, c_out, 3, padding=1), nn.Linear(c_out, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).flatten(1))


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    bn = nn.BatchNorm2d(c_out)
    with torch.no_grad():  # trained-looking statistics: folding them must matter
        bn.running_mean.copy_(0.1 * torch.randn(c_out))
        bn.running_var.copy_(0.5 + torch.rand(c_out))
        bn.weight.copy_(1.0 + 0.1 * torch.randn(c_out))
        bn.bias.copy_(0.1 * torch.randn(c_out))
    return [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False), bn]


class BasicBlock(nn.Module):
    """ResNet-18's block: conv-bn-relu-conv-bn plus the shortcut (a strided 1x1 conv-bn where it downsamples)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(c_in, c_out, 3, stride), nn.ReLU(), *_conv_bn(c_out, c_out, 3))
        self.downsample = nn.Sequential(*_conv_bn(c_in, c_out, 1, stride)) if stride != 1 or c_in != c_out else None

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.downsample is None else self.downsample(x)))


class ResNetStem(nn.Module):
    """ResNet-18's stem and first two stages (conv 7x7/2, bn, relu, max-pool, two blocks, a downsampling
    block and one more), batch norm in eval mode."""

    def __init__(self, c=16):
        super().__init__()
        self.net = nn.Sequential(*_conv_bn(3, c, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1), BasicBlock(c, c),
                                 BasicBlock(c, c), BasicBlock(c, 2 * c, 2), BasicBlock(2 * c, 2 * c))

    def forward(self, x):
        return self.net(x)


class BatchNormReLU(nn.Module):
    """BatchNorm2d (eval) then ReLU, with no conv: a norm EqiForge sees whole."""

    def __init__(self, c=64):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        with torch.no_grad():
            self.bn.running_mean.copy_(0.1 * torch.randn(c))
            self.bn.running_var.copy_(1.0 + 0.1 * torch.rand(c))

    def forward(self, x):
        return torch.relu(self.bn(x))


class InstanceNorm(nn.Module):
    """nn.InstanceNorm2d (no affine, no running statistics)."""

    def __init__(self, c=64):
        super().__init__()
        self.norm = nn.InstanceNorm2d(c)

    def forward(self, x):
        return self.norm(x)


# --- plain externs: PyTorch calls EqiForge does not optimize ---

def max_reduction(x):
    """torch.amax over the last dim of a [rows, 4096] tensor."""
    return torch.amax(x, dim=-1)


def argmax(x):
    """torch.argmax over the last dim (an integer result)."""
    return torch.argmax(x, dim=-1)


def max_pool2d(x):
    """F.max_pool2d 3x3, stride 2."""
    return F.max_pool2d(x, 3, stride=2)


def conv2d(x, w):
    """F.conv2d with a weight input, padding 1."""
    return F.conv2d(x, w, padding=1)


# --- the suite: every program at its benchmark size and at its test size ---

class Entry(NamedTuple):
    name: str
    doc: str
    build: Callable[[object], tuple[Callable, tuple[torch.Tensor, ...]]]  # size -> (program, inputs)
    full: object  # the benchmark size, as build takes it
    small: object  # the test size


def _fn(fn: Callable, full: list[tuple], small: list[tuple]) -> Entry:
    """A plain function of standard-normal inputs of the given shapes."""
    return Entry(fn.__name__, fn.__doc__, lambda shapes: (fn, _randn(*shapes)), full, small)


def _mod(name: str, cls: type, full: tuple[dict, list[tuple]], small: tuple[dict, list[tuple]],
         doc: str | None = None) -> Entry:
    """An nn.Module built from keyword arguments, on standard-normal inputs: a size is (kwargs, shapes)."""
    return Entry(name, doc or cls.__doc__, lambda size: (cls(**size[0]), _randn(*size[1])), full, small)


def _labelled(fn: Callable, full: tuple[int, int], small: tuple[int, int], name: str = "", doc: str = "") -> Entry:
    """A loss of [batch, classes] logits and integer labels in [0, classes): a size is (batch, classes)."""
    def build(size):
        batch, classes = size
        return fn, (torch.randn(batch, classes), torch.randint(0, classes, (batch,)))
    return Entry(name or fn.__name__, doc or fn.__doc__, build, full, small)


_ROWS = [(2048, 1024)], [(8, 64)]  # elementwise: 2M elements (8 MB) at benchmark size; a small test shape
_PAIR = [(1024, 1024)] * 2, [(8, 64)] * 2  # losses of a prediction and a target
_GEMM = ({"d_in": 1024, "d_out": 1024}, [(512, 1024)]), ({"d_in": 32, "d_out": 48}, [(16, 32)])
_CONV = ({"c_in": 16, "c_out": 32}, [(8, 16, 64, 64)]), ({"c_in": 4, "c_out": 16}, [(2, 4, 8, 8)])

ENTRIES: list[Entry] = [
    # single composites
    _fn(softmax, [(512, 4096)], [(8, 64)]),
    _fn(log_softmax, [(16, 131072)], [(4, 256)]),
    _mod("layer_norm", nn.LayerNorm, ({"normalized_shape": 1024}, [(1024, 1024)]),
         ({"normalized_shape": 64}, [(8, 64)]), doc="nn.LayerNorm over the last dim (elementwise affine)."),
    _mod("rms_norm", RMSNorm, ({"d": 1024}, [(1024, 1024)]), ({"d": 64}, [(8, 64)])),
    _mod("rms_norm_native", nn.RMSNorm, ({"normalized_shape": 1024, "eps": 1e-6}, [(1024, 1024)]),
         ({"normalized_shape": 64, "eps": 1e-6}, [(8, 64)]), doc="nn.RMSNorm, PyTorch's own (F.rms_norm)."),
    _fn(gelu_erf, *_ROWS),
    _fn(gelu_tanh, *_ROWS),
    _fn(gelu_written_out, *_ROWS),
    _fn(silu, *_ROWS),
    _fn(swish_written_out, *_ROWS),
    _fn(softplus, *_ROWS),
    _fn(mish, *_ROWS),
    _fn(elu, *_ROWS),
    _fn(selu, *_ROWS),
    _fn(hardtanh, *_ROWS),
    _fn(hardswish, *_ROWS),
    _fn(hardsigmoid, *_ROWS),
    _fn(leaky_relu, *_ROWS),
    _fn(logsumexp, [(512, 4096)], [(8, 64)]),
    _fn(cumsum, [(256, 4096)], [(8, 64)]),
    # norms
    _fn(l2_normalize, [(1024, 1024)], [(8, 64)]),
    _fn(frobenius_normalize, [(1024, 1024)], [(8, 64)]),
    _mod("batch_norm_relu", BatchNormReLU, ({"c": 64}, [(8, 64, 32, 32)]), ({"c": 8}, [(2, 8, 4, 4)])),
    _mod("instance_norm", InstanceNorm, ({"c": 64}, [(8, 64, 32, 32)]), ({"c": 8}, [(2, 8, 4, 4)])),
    # GEMM + epilogue chains
    _mod("linear_relu", LinearReLU, *_GEMM),
    _mod("linear_gelu", LinearGELU, *_GEMM),
    _mod("linear_sigmoid_scale_residual", LinearSigmoidScaleResidual, *_GEMM),
    _mod("linear_residual_layernorm", LinearResidualLayerNorm, ({"d": 1024}, [(512, 1024)]), ({"d": 32}, [(16, 32)])),
    _fn(matmul_scale_softmax, [(512, 512), (512, 1024)], [(16, 32), (32, 48)]),
    _mod("linear_clamp_logsumexp", LinearClampLogsumexp, *_GEMM),
    _mod("linear_bias_hardswish", LinearBiasHardswish, *_GEMM),
    _fn(bmm_softmax_bmm, [(8, 256, 128), (8, 128, 256), (8, 256, 128)], [(2, 16, 8), (2, 8, 16), (2, 16, 8)]),
    # losses
    _labelled(cross_entropy, (4096, 1000), (16, 10)),
    _labelled(nll_loss, (4096, 1000), (16, 10)),
    _labelled(cross_entropy, (512, 4096), (16, 10), "cross_entropy_wide",
              "F.cross_entropy of [512, 4096] logits against integer labels: few rows, many classes."),
    _fn(mse_loss, *_PAIR),
    _fn(smooth_l1_loss, *_PAIR),
    _fn(hinge_loss, *_PAIR),
    _fn(kl_div_loss, *_PAIR),
    _fn(bce_with_logits, *_PAIR),
    _fn(cosine_loss, [(4096, 256)] * 2, [(16, 32)] * 2),
    # small attention and MLP blocks
    _fn(sdpa, [(2, 8, 256, 64)] * 3, [(1, 2, 16, 8)] * 3),
    _mod("causal_self_attention", CausalSelfAttention, ({"d": 256, "heads": 4, "seq": 128}, [(4, 128, 256)]),
         ({"d": 32, "heads": 2, "seq": 16}, [(2, 16, 32)])),
    _mod("gpt_block", GPTBlock, ({"d": 256, "heads": 4, "seq": 128}, [(4, 128, 256)]),
         ({"d": 32, "heads": 2, "seq": 16}, [(2, 16, 32)])),
    _mod("netvlad", NetVLAD, ({"d": 128, "clusters": 32}, [(16, 512, 128)]),
         ({"d": 16, "clusters": 4}, [(2, 8, 16)])),
    _mod("vision_attention", VisionAttention, ({"c": 128, "heads": 4}, [(2, 128, 16, 16)]),
         ({"c": 16, "heads": 2}, [(1, 16, 4, 4)])),
    _mod("swiglu_mlp", SwiGLU, ({"d": 512, "hidden": 1024}, [(256, 512)]), ({"d": 32, "hidden": 64}, [(16, 32)])),
    _mod("prenorm_mlp", PreNormMLP, ({"d": 256, "hidden": 1024}, [(2, 128, 256)]),
         ({"d": 32, "hidden": 64}, [(2, 8, 32)])),
    # conv blocks
    _mod("conv_relu_batchnorm", ConvReLUBatchNorm, *_CONV),
    _mod("conv_bias_tanh", ConvBiasTanh, *_CONV),
    _mod("conv_gelu_maxpool", ConvGELUMaxPool, *_CONV),
    _mod("conv_gelu_global_pool", ConvGELUGlobalPool, *_CONV),
    _mod("conv_groupnorm_silu", ConvGroupNormSiLU, *_CONV),
    _mod("resnet_stem_stages", ResNetStem, ({"c": 64}, [(4, 3, 112, 112)]), ({"c": 4}, [(1, 3, 16, 16)])),
    _mod("conv_pool_classifier", ConvPoolClassifier, ({"c_in": 16, "c_out": 64}, [(8, 16, 64, 64)]),
         ({"c_in": 4, "c_out": 8, "classes": 10}, [(2, 4, 8, 8)])),
    # plain externs
    _fn(argmax, [(512, 4096)], [(8, 64)]),
    _fn(max_reduction, [(512, 4096)], [(8, 64)]),
    _fn(max_pool2d, [(8, 64, 64, 64)], [(2, 4, 8, 8)]),
    _fn(conv2d, [(8, 32, 32, 32), (64, 32, 3, 3)], [(2, 4, 8, 8), (8, 4, 3, 3)]),
]


def _program(entry: Entry, size) -> Program:
    return Program(entry.name, " ".join(entry.doc.split()), False, lambda: entry.build(size), _itself)


SUITE: dict[str, Program] = {e.name: _program(e, e.full) for e in ENTRIES}  # benchmark sizes
SMALL: dict[str, Program] = {e.name: _program(e, e.small) for e in ENTRIES}  # shrunk for the correctness test
