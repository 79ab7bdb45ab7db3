"""Repeated blocks (issue 14, LLM depth): identical layers are found in the captured graph, one is optimized,
its plan is instantiated for every layer with that layer's weights, and the result is what the whole-graph
path gives and what eager computes."""
import functools

import pytest
import torch
import torch.nn.functional as F

from eqiforge import frontend
from eqiforge.pipeline import blocks, validate
from eqiforge.pipeline.report import StageTimer
from eqiforge.pipeline.compile import compile_graph
from eqiforge.pipeline.options import Options
from test_deep_models import llama, residual_attention
from test_end_to_end import assert_close, fresh_like


def residual_attention_with(*activations):
    """test_deep_models' residual attention layers, each with its own activation."""
    def program(x, w):
        for act in activations:
            h = F.layer_norm(x, (16,))
            a = torch.softmax(h @ h.mT / 4, -1) @ h
            x = x + act(a @ w) * 0.1
        return x
    gen = torch.Generator().manual_seed(len(activations))
    return program, (torch.randn(2, 8, 16, generator=gen), torch.randn(16, 16, generator=gen))


@functools.lru_cache(maxsize=None)
def captured(build, *args):
    program, inputs = build(*args)
    return program, inputs, frontend.capture(program, inputs)


def optimized(cap, inputs, **options):
    opts = Options.of(original_if_no_better=False, **options)  # the plan runs, not the original program
    return compile_graph(cap.graph, cap.input_names, cap.out_spec, opts, StageTimer(), examples=list(inputs))


@pytest.mark.parametrize("build", [llama, residual_attention], ids=["llama", "residual-attention"])
def test_k_identical_layers_are_k_blocks(build):
    _, _, cap = captured(build, 3)
    found, why = blocks.find(cap.graph)
    assert found is not None, why
    assert found.count == 3 and len({len(nodes) for nodes in found.nodes}) == 1
    assert all(set(a).isdisjoint(b) for a in found.nodes for b in found.nodes if a is not b)
    assert len(found.exits) == 1, "one tensor (the residual stream) passes from block to block"


def test_one_layer_and_differing_layers_have_no_blocks():
    for build, args in [(llama, (1,)), (residual_attention_with, (torch.relu, torch.tanh))]:
        _, _, cap = captured(build, *args)
        found, why = blocks.find(cap.graph)
        assert found is None and why.startswith("no repeated blocks"), why


def test_shared_blocks_plan_matches_eager_with_each_layers_weights():
    program, inputs, cap = captured(llama, 3)
    opt = optimized(cap, inputs)
    assert opt.report.repeated_blocks.startswith("3 repeated blocks of ")
    assert opt.report.repeated_blocks.endswith("nodes optimized once")
    assert opt.report.runs == "the plan" and opt.report.validation.startswith("passed")
    assert validate.check_encoding(opt.extraction.snapshot, cap.graph) == []
    same_weights = llama(3)[0]
    for layer in same_weights[1:]:
        layer.load_state_dict(same_weights[0].state_dict())
    with torch.no_grad():
        for x in (inputs, fresh_like(inputs, 1), fresh_like(inputs, 2)):
            want = program(*x)
            assert_close(opt(*x), want)
            # a plan that reused layer 0's weights would compute this, which is far from eager
            assert (same_weights(*x) - want).norm() > 1e-2 * want.norm()


@pytest.mark.parametrize("build", [llama, residual_attention], ids=["llama", "residual-attention"])
def test_shared_blocks_plan_is_the_whole_graph_plan(build):
    """With the greedy extractor (the ILP's answer on the whole graph depends on its time limit: on deeper
    graphs it stops short of the optimum, and the shared plan, solved per block, is the cheaper one)."""
    _, inputs, cap = captured(build, 3)
    shared = optimized(cap, inputs, extractor="greedy")
    whole = optimized(cap, inputs, share_blocks=False, extractor="greedy")
    assert shared.report.repeated_blocks.startswith("3 repeated blocks")
    assert shared.report.extraction_method == "greedy (one block), greedy (the rest)"
    assert whole.report.repeated_blocks == "off (share_blocks=False)" and whole.report.extraction_method == "greedy"
    assert shared.plan.graph.op_counts() == whole.plan.graph.op_counts()
    assert shared.plan.predicted_seconds == pytest.approx(whole.plan.predicted_seconds, rel=1e-9)


def test_weights_passed_as_inputs_are_each_blocks_own():
    """Unfolded weights (graph inputs, as live weights are): each block reads its own from outside."""
    program, inputs, _ = captured(llama, 3)
    cap = frontend.capture(program, inputs, fold_params=False)
    opts = Options.of(original_if_no_better=False, fold_constants=False)
    opt = compile_graph(cap.graph, cap.input_names, cap.out_spec, opts, StageTimer(), bound=cap.param_inputs,
                             examples=list(inputs))
    assert opt.report.repeated_blocks.startswith("3 repeated blocks") and opt.report.validation.startswith("passed")
    with torch.no_grad():
        for x in (inputs, fresh_like(inputs, 4)):
            assert_close(opt(*x), program(*x))


def test_layers_outside_the_blocks_are_optimized_as_usual():
    program, inputs, cap = captured(residual_attention_with, torch.relu, torch.relu, torch.tanh)
    opt = optimized(cap, inputs)
    assert opt.report.repeated_blocks.startswith("2 repeated blocks") and opt.report.validation.startswith("passed")
    assert opt.plan.graph.op_counts()["Tanh"] == 1 and opt.plan.graph.op_counts()["Relu"] == 2
    with torch.no_grad():
        for x in (inputs, fresh_like(inputs, 3)):
            assert_close(opt(*x), program(*x))


def test_the_same_program_gives_the_same_plan():
    _, inputs, cap = captured(residual_attention, 3)
    assert optimized(cap, inputs).source == optimized(cap, inputs).source


def hf_llama(layers: int):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(layers)
    model = transformers.LlamaModel(cfg).eval()
    return (lambda ids: model(ids, use_cache=False).last_hidden_state), (torch.randint(0, 128, (2, 8)),)


@pytest.mark.slow
def test_layers_reading_values_computed_once_are_blocks():
    """A Hugging Face Llama computes the rotary tables once and every layer reads views of them, which
    hash-consing makes one node inside the first layer: they are taken out, and each layer is one block
    that passes one tensor on."""
    program, inputs, cap = captured(hf_llama, 3)
    found, why = blocks.find(cap.graph)
    assert found is not None and found.count == 3 and len(found.exits) == 1, why
    opt = optimized(cap, inputs, extractor="greedy")
    assert opt.report.repeated_blocks.startswith("3 repeated blocks")
    with torch.no_grad():
        for x in (inputs, (torch.randint(0, 128, (2, 8)),)):
            assert_close(opt(*x), program(*x))


def layers_with_calls(*ops):
    """Residual layers that each make a call EqiForge keeps whole (an Extern, named per call site, as each
    GPT-2 layer's cache update is its own ``cat``): layer k calls ``ops[k]``."""
    def program(x, w):
        for op in ops:
            h = op(F.layer_norm(x, (16,)), -1)
            x = x + torch.relu(torch.softmax(h @ h.mT / 4, -1) @ h @ w) * 0.1
        return x
    gen = torch.Generator().manual_seed(len(ops))
    return program, (torch.randn(2, 8, 16, generator=gen), torch.randn(16, 16, generator=gen))


def test_layers_making_the_same_pytorch_call_are_blocks_and_each_makes_its_own():
    program, inputs, cap = captured(layers_with_calls, torch.cumprod, torch.cumprod, torch.cumprod)
    externs = [n.attrs[0] for n in cap.graph.nodes if n.op == "Extern"]
    assert len(set(externs)) == 3
    opt = optimized(cap, inputs)
    assert opt.report.repeated_blocks.startswith("3 repeated blocks"), opt.report.repeated_blocks
    assert sorted(n.attrs[0] for n in opt.plan.graph.nodes if n.op == "Extern") == sorted(externs)
    with torch.no_grad():
        for x in (inputs, fresh_like(inputs, 5)):
            assert_close(opt(*x), program(*x))


def test_a_layer_making_another_pytorch_call_is_not_a_copy():
    _, _, cap = captured(layers_with_calls, torch.cumprod, torch.cumprod, torch.logcumsumexp)
    found, why = blocks.find(cap.graph)
    assert found is not None and found.count == 2, why
    other = [i for i, n in enumerate(cap.graph.nodes) if n.op == "Extern" and "logcumsumexp" in n.attrs[0]]
    assert other and not set(other) & {i for nodes in found.nodes for i in nodes}
