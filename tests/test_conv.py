"""Conv nets (issue 14 item 5): convolution, pooling and inference batch norm are IR ops, and the plans of
ResNet-18-style blocks (written with torch.nn; torchvision is not a dependency) fold every batch norm into its
convolution's weight and bias, so no batch-norm arithmetic runs on the activations."""
from collections import Counter

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import eqiforge
from eqiforge import ops
from eqiforge.frontend import capture


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(c_out)]


class BasicBlock(nn.Module):
    """ResNet-18's block: conv-bn-relu-conv-bn plus the identity, or a strided 1x1 conv-bn downsample."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(c_in, c_out, 3, stride), nn.ReLU(), *conv_bn(c_out, c_out, 3))
        self.downsample = nn.Sequential(*conv_bn(c_in, c_out, 1, stride)) if stride != 1 or c_in != c_out else None

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        return torch.relu(self.body(x) + shortcut)


def stem(c_out: int = 8) -> nn.Module:
    """ResNet's stem: conv 7x7 stride 2, bn, relu, max-pool 3x3 stride 2."""
    return nn.Sequential(*conv_bn(3, c_out, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))


def inference(model: nn.Module) -> nn.Module:
    """``model`` in eval mode with batch-norm statistics and affines far from the identity."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            for t, lo, hi in ((m.weight, 0.5, 2.0), (m.bias, -1.0, 1.0), (m.running_mean, -1.0, 1.0),
                              (m.running_var, 0.5, 2.0)):
                t.data.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)
    return model.eval()


def computed_ops(report) -> Counter:
    """What a plan computes: its op counts without leaves."""
    return Counter({op: n for op, n in report.ops_after.items() if n and ops.get(op).kind != "leaf"})


CASES = {
    "basic block": (lambda: BasicBlock(8, 8), (2, 8, 8, 8), {"Conv2d": 2, "Relu": 2, "Add": 1}),
    "downsample block": (lambda: BasicBlock(4, 8, stride=2), (2, 4, 8, 8), {"Conv2d": 3, "Relu": 2, "Add": 1}),
    "stem": (stem, (2, 3, 16, 16), {"Conv2d": 1, "Relu": 1, "MaxPool2d": 1}),
}


@pytest.mark.parametrize("name", CASES)
def test_batch_norms_fold_into_the_convolutions(name):
    build, shape, expected = CASES[name]
    torch.manual_seed(1)
    model = inference(build())
    x = torch.randn(shape)
    opt = eqiforge.optimize(model, (x,))
    r = opt.report
    assert "Extern" not in r.ops_before
    assert computed_ops(r) == expected, r.summary()  # the norms' Mul/Add/Rsqrt are gone: folded or constant
    assert r.runs == "the plan", r.runs
    for inputs in (x, torch.randn(shape)):
        with torch.no_grad():
            assert_close(opt(inputs), model(inputs), rtol=1e-4, atol=1e-5)


def test_conv_nets_capture_without_externs():
    """Convolutions (with and without bias), both poolings, adaptive pooling and inference batch norm are IR
    ops: nothing of a small conv net is left to PyTorch calls."""
    model = inference(nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, groups=3), nn.BatchNorm2d(6), nn.ReLU(),
                                    nn.MaxPool2d(2), nn.Conv2d(6, 4, 1, dilation=2), nn.AvgPool2d(3, 1, 1),
                                    nn.AdaptiveAvgPool2d(2)))
    x = torch.randn(2, 3, 8, 8)
    counts = capture(model, (x,)).graph.op_counts()
    assert counts.get("Extern", 0) == 0
    assert (counts["Conv2d"], counts["MaxPool2d"], counts["AvgPool2d"]) == (2, 1, 2)
    opt = eqiforge.optimize(model, (x,))
    for inputs in (x, torch.randn(2, 3, 8, 8)):
        with torch.no_grad():
            assert_close(opt(inputs), model(inputs), rtol=1e-4, atol=1e-5)


def test_max_pool_indices_stay_a_pytorch_call():
    """A program that reads max-pool's indices keeps that call: the IR op gives the values only."""
    def pool(x):
        values, indices = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
        return values * 2, indices
    x = torch.randn(1, 2, 4, 4)
    assert "MaxPool2d" not in capture(pool, (x,)).graph.op_counts()
    opt = eqiforge.optimize(pool, (x,))
    for got, want in zip(opt(x), pool(x)):
        assert torch.equal(got, want)


def test_parallel_convolutions_of_one_input_merge():
    """Two 3x3 convolutions of one input (an inception-style branch) become one convolution with both
    weights, sliced apart, when that is predicted faster."""
    class Branches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.a(x)), torch.sigmoid(self.b(x))
    model = Branches().eval()
    x = torch.randn(1, 16, 8, 8)
    opt = eqiforge.optimize(model, (x,), priced_device="H100")
    assert computed_ops(opt.report)["Conv2d"] == 1, opt.report.summary()
    with torch.no_grad():
        for got, want in zip(opt(x), model(x)):
            assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_plan_with_convolutions_runs_on_the_triton_backend(monkeypatch):
    """The triton backend runs a convolution as a PyTorch call between its generated kernels."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model = inference(BasicBlock(4, 4))
    x = torch.randn(1, 4, 4, 4)
    opt = eqiforge.optimize(model, (x,), backend="triton")
    assert "torch.nn.functional.conv2d(" in opt.source
    with torch.no_grad():
        assert_close(opt(x), model(x), rtol=1e-4, atol=1e-5)
