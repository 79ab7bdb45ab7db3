"""The third capture path, Dynamo's graph capture (frontend/dynamo_capture.py): tried when torch.export and
AOTAutograd both fail, it takes the program as one Dynamo graph and lowers it with AOTAutograd, giving the
same kind of traced program as the other paths; a graph break is an error that names its reason."""
import importlib

import pytest
import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import eqiforge
from eqiforge.errors import EqiforgeError
from eqiforge.frontend.calls import flat_call

capture = importlib.import_module("eqiforge.frontend.capture")  # the module (the package exports the function)
DYNAMO = "Dynamo (torch._dynamo graph capture)"


def flat(module, *inputs):
    call, tensors, names = flat_call(module, inputs, None)
    return capture._Flat(module, call), tensors, names


@pytest.mark.slow
def test_gpt2_without_its_cache_is_captured_by_dynamo_and_matches_eager():
    """GPT-2 returning only its logits with ``use_cache=False`` defeats both earlier paths: torch.export's
    decomposition views a non-contiguous tensor in its Conv1D, and AOTAutograd's trace stops on transformers'
    data-dependent packed-sequence check, which transformers skips while Dynamo traces."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()  # the small config's token ids are outside the small vocabulary
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=64, n_head=4, vocab_size=128, n_positions=64)).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = gpt2

        def forward(self, ids):
            return self.gpt2(ids, use_cache=False).logits

    model, ids = Logits(), torch.randint(0, 128, (2, 12))
    opt = eqiforge.optimize(model, (ids,))
    fallback = opt.report.capture_fallback
    assert fallback.startswith("torch.export could not decompose it to core ATen (run_decompositions): ")
    assert "AOTAutograd (aot_export_module) could not trace the program: " in fallback
    assert fallback.endswith(f"captured by {DYNAMO}")
    with torch.no_grad():
        for call in (ids, torch.randint(0, 128, (2, 12))):
            torch.testing.assert_close(opt(call), model(call), rtol=1e-4, atol=1e-5)


class Scaled(torch.nn.Module):
    """A parameter, a buffer, an unused input, and an input returned as it is."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0]))

    def forward(self, x, unused, y):
        return self.lin(y) * self.scale + x, x


def test_the_dynamo_path_traces_state_and_inputs_as_the_other_paths_do():
    """Parameters and buffers are state named as torch.export names them; the call's tensors are the user
    placeholders in call order (an unused one included); the graph computes the program; Dynamo keeps
    nothing of it (no cache entry on _Flat.forward, no compiled function in capture's globals)."""
    module, x, unused, y = Scaled(), torch.randn(2, 3), torch.randn(5), torch.randn(2, 4)
    program, inputs, names = flat(module, x, unused, y)
    traced = capture._by_dynamo(program, inputs, [])
    assert traced.path == DYNAMO and traced.mutated == [] and traced.written == []
    assert sorted(traced.state_names.values()) == ["b_scale", "p_lin_bias", "p_lin_weight"]
    assert traced.state[next(k for k, v in traced.state_names.items() if v == "b_scale")] is module.scale
    assert len(traced.user) == 3
    placeholders = [n.name for n in traced.gm.graph.nodes if n.op == "placeholder"]
    feeds = {**traced.state, **dict(zip(traced.user, inputs))}
    with torch.no_grad():
        got = traced.gm(*[feeds[name] for name in placeholders])
        torch.testing.assert_close(list(got), list(module(x, unused, y)))
    assert traced.rename(names) == names
    assert _debug_get_cache_entry_list(capture._Flat.forward.__code__) == []
    assert not [name for name in vars(capture) if name.startswith("__compiled_fn")]


def test_a_graph_break_is_a_stage_failure_naming_its_reason_and_place():
    class Chatty(torch.nn.Module):
        def forward(self, x):
            print("tracing")
            return x.sin()
    program, inputs, _ = flat(Chatty(), torch.randn(3))
    with pytest.raises(capture._StageFailed) as info:
        capture._by_dynamo(program, inputs, [])
    text = info.value.describe()
    assert text.startswith(f"{DYNAMO} could not capture the program as one graph (fullgraph=True): NotOneGraph: ")
    assert "`print`" in text and "test_capture_dynamo.py:" in text and 'print("tracing")' in text


def test_a_program_no_path_captures_as_one_graph_is_an_error_naming_all_three():
    def branchy(x):
        return x.sin() if x.sum().item() > 0 else x.cos()
    with pytest.raises(EqiforgeError) as info:
        eqiforge.optimize(branchy, (torch.randn(3),))
    text = str(info.value)
    assert "every capture path failed" in text
    for path in ("torch.export could not trace", "AOTAutograd (aot_export_module) could not trace",
                 f"{DYNAMO} could not capture the program as one graph"):
        assert path in text
    assert "torch.where or torch.cond" in text  # the control-flow hint: Dynamo's failure is data-dependent too
