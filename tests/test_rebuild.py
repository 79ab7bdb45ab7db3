"""A plan's outputs put back in the program's output structure (runtime/rebuild.py): the same structure
pytree.tree_unflatten builds, new objects every call, and a node's own unflatten where a template cannot serve."""
import collections

import pytest
import torch
import torch.utils._pytree as pytree
import transformers

from eqiforge.runtime.rebuild import rebuilder


def decoding_step_output(model):
    """A decoding step's output (logits and a cache with the prompt's keys), its cache classes registered."""
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    register_cache_pytrees_for_model(model)
    with torch.no_grad():
        out = model(torch.randint(0, 64, (2, 5)))
        return model(torch.randint(0, 64, (2, 1)), past_key_values=out.past_key_values)


MODELS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4,
                                                                         vocab_size=64, n_positions=64)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)),
}


@pytest.mark.parametrize("name", MODELS)
def test_a_model_output_with_its_cache_is_rebuilt_as_unflatten_builds_it_and_decodes_the_same(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    leaves, spec = pytree.tree_flatten(decoding_step_output(model))
    assert len(leaves) > 2  # the cache is a pytree node here, not one leaf
    rebuild = rebuilder(spec)
    assert rebuild.__qualname__.startswith("_templated.")  # copies a template, not transformers' unflatten
    got, again = rebuild(leaves), rebuild(leaves)
    flat, got_spec = pytree.tree_flatten(got)
    assert got_spec == spec and all(a is b for a, b in zip(flat, leaves))
    assert type(got) is type(pytree.tree_unflatten(leaves, spec))
    assert got.past_key_values is got["past_key_values"]  # one object, as item and as attribute
    assert got.past_key_values is not again.past_key_values  # a new cache every call: decoding appends to it
    token = torch.randint(0, 64, (2, 1))
    with torch.no_grad():
        want = model(token, past_key_values=pytree.tree_unflatten(leaves, spec).past_key_values).logits
        torch.testing.assert_close(model(token, past_key_values=got.past_key_values).logits, want, rtol=0, atol=0)
        torch.testing.assert_close(model(token, past_key_values=again.past_key_values).logits, want, rtol=0, atol=0)


class Slotted:
    """A node whose state is in slots: no template copy, its own unflatten."""

    __slots__ = ("a", "b", "made")

    def __init__(self, a, b):
        self.a, self.b, self.made = a, b, "by __init__"


pytree.register_pytree_node(Slotted, lambda s: ([s.a, s.b], None), lambda kids, _: Slotted(*kids))


def test_plain_containers_namedtuples_and_a_node_of_slots_are_rebuilt():
    pair = collections.namedtuple("pair", "first second")
    t = [torch.randn(2) for _ in range(5)]
    structure = {"x": (t[0], [t[1], pair(t[2], t[3])]), "s": Slotted(t[4], t[0] * 2)}
    leaves, spec = pytree.tree_flatten(structure)
    got = rebuilder(spec)(leaves)
    assert pytree.tree_flatten(got)[1] == spec and all(a is b for a, b in zip(pytree.tree_leaves(got), leaves))
    assert isinstance(got["x"][1][1], pair) and got["s"].made == "by __init__"
    assert got["s"] is not structure["s"] and got["x"][1] is not structure["x"][1]
