"""Hugging Face models as they come (issue 14): small configs built here (random weights, no downloads), the
raw model optimized with the default config and the cache on, checked against eager on the example input
and on a fresh one: every output leaf (logits, each cache tensor) close, the output and cache types as
eager's; the rebuilt cache works when passed back to the eager model; greedy decoding with the cache through
the optimized module gives eager's tokens (a plan for every cache length from the second step on); under
torch.compile(backend="eqiforge") every family runs EqiForge plans and matches eager."""
import copy

import pytest
import torch
import torch.utils._pytree as pytree

import eqiforge
from eqiforge.examples import greedy

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()  # the small configs' token ids are outside the small vocabulary

SEQ, BATCH, VOCAB = 12, 2, 128
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
              max_position_embeddings=64)
FAMILIES = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=128)),  # SDPA; 128: decoding runs to 76
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON, num_key_value_heads=2)),
    "mistral": lambda: transformers.MistralForCausalLM(transformers.MistralConfig(**COMMON, num_key_value_heads=2)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**COMMON, num_key_value_heads=2)),
    "phi3": lambda: transformers.Phi3ForCausalLM(transformers.Phi3Config(**COMMON, num_key_value_heads=2,
                                                                         pad_token_id=0)),
    "opt": lambda: transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=1, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=64)),
    "gpt_neox": lambda: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**COMMON)),
    "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=VOCAB, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64)),
    "qwen3": lambda: transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**COMMON, num_key_value_heads=2,
                                                                            head_dim=16)),
    "gemma": lambda: transformers.GemmaForCausalLM(transformers.GemmaConfig(**COMMON, num_key_value_heads=2,
                                                                            head_dim=16)),
    "gemma2": lambda: transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**COMMON, num_key_value_heads=2,
                                                                               head_dim=16)),
    "gemma3": lambda: transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**COMMON, num_key_value_heads=2,
                                                                                   head_dim=16)),
    "phi": lambda: transformers.PhiForCausalLM(transformers.PhiConfig(**COMMON)),
    "falcon": lambda: transformers.FalconForCausalLM(transformers.FalconConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1, num_attention_heads=4)),
    "bloom": lambda: transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=VOCAB, hidden_size=64,
                                                                            n_layer=1, n_head=4)),
    "gpt_bigcode": lambda: transformers.GPTBigCodeForCausalLM(transformers.GPTBigCodeConfig(
        vocab_size=VOCAB, n_embd=64, n_layer=1, n_head=4, n_positions=64)),
    "gptj": lambda: transformers.GPTJForCausalLM(transformers.GPTJConfig(
        vocab_size=VOCAB, n_embd=64, n_layer=1, n_head=4, rotary_dim=8, n_positions=64)),  # x[..., ::2] rotary
    "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **COMMON, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": lambda: transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        **COMMON, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=64)),
}


#: the families the default run optimizes (GPT-2 also reaches the capture's fallback path); the slow tier runs
#: every family
FAST = {"gpt2", "llama"}


def families(fast=FAST) -> list:
    """Every family as a test parameter, those outside ``fast`` marked slow."""
    return [f if f in fast else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES]


def ids(seed: int, length: int = SEQ) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, length), generator=torch.Generator().manual_seed(seed))


def call_inputs(family: str, seed: int) -> tuple[tuple, dict]:
    """(args, kwargs) of a forward call: token ids, and for the seq2seq model the decoder's too."""
    return (ids(seed),), ({"decoder_input_ids": ids(seed + 100, SEQ // 2)} if family == "bart" else {})


def assert_outputs_close(got, want):
    """Same structure (output class, cache class and layout) and every tensor leaf close."""
    assert type(got) is type(want) and pytree.tree_structure(got) == pytree.tree_structure(want)
    cache = getattr(want, "cache", None)
    assert cache is not None and type(got.cache) is type(cache)
    leaves = pytree.tree_leaves(want)
    assert len(leaves) > 1 and any(t.abs().sum() > 0 for t in leaves)
    for g, w in zip(pytree.tree_leaves(got), leaves):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


_OPTIMIZED: dict = {}


def optimized(family: str):
    """(model, optimized module) for a family, optimized once for the whole file."""
    if family not in _OPTIMIZED:
        torch.manual_seed(0)
        model = FAMILIES[family]().eval()
        args, kwargs = call_inputs(family, 0)
        _OPTIMIZED[family] = model, eqiforge.optimize(model, args, kwargs)
    return _OPTIMIZED[family]


@pytest.mark.parametrize("family", families())
def test_family_as_it_comes_matches_eager_on_the_example_and_a_fresh_input(family):
    model, opt = optimized(family)
    products = sum(opt.report.ops_after.get(op, 0) for op in ("MatMul", "GemmK", "AttentionK"))
    assert opt.report.runs == "the plan" and products > 0
    plans = len(opt.shape_log)
    with torch.no_grad():
        for seed in (0, 1):
            args, kwargs = call_inputs(family, seed)
            out = opt(*args, **kwargs)
            assert_outputs_close(out, model(*args, **kwargs))
    assert len(opt.shape_log) == plans  # the fresh input has the example's signature: the example's plan ran


@pytest.mark.parametrize("family", families(fast=set()))
def test_family_under_torch_compile_matches_eager_and_runs_a_plan(family):
    """torch.compile(model, backend="eqiforge") with the default settings, in inference: every graph Dynamo
    makes gets an EqiForge plan (or Inductor compiles it as written where the plan is no better; never a
    failure), on the example and on a fresh input."""
    from eqiforge import dynamo
    from eqiforge.frontend.calls import register_transformers_pytrees
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    register_transformers_pytrees(model, ())  # so that the outputs' caches open into tensors to compare
    torch._dynamo.reset()
    reports = len(dynamo.REPORTS)
    compiled = torch.compile(model, backend="eqiforge")
    with torch.no_grad():
        for seed in (0, 1):
            args, kwargs = call_inputs(family, seed)
            assert_outputs_close(compiled(*args, **kwargs), model(*args, **kwargs))
    runs = [r.runs for r in dynamo.REPORTS[reports:]]
    assert runs and all(r == "the plan" or r.startswith("the original graph, compiled by Inductor") for r in runs)
    assert "the plan" in runs
    for report in dynamo.REPORTS[reports:]:  # a plan that runs is Inductor's code, not the torch fallback
        inductor = [n for n in report.lowering_notes if "Inductor" in n]
        assert report.runs != "the plan" or inductor[-1].startswith("Inductor compiled the plan"), inductor


@pytest.mark.slow  # tests/test_dynamo_backend.py trains a small model through the backend in the default run
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_training_under_torch_compile_gives_eagers_gradients(family):
    """A training step through the eqiforge backend (forward planned by EqiForge, backward by Inductor):
    every parameter's gradient as eager's. torch 2.13's decomposition of SDPA's CPU flash kernel breaks the
    backward AOTAutograd derives from it (gradients 9x off upstream of the attention); the backend keeps that
    op whole where a graph is differentiated."""
    torch.manual_seed(0)
    model = FAMILIES[family]().train()
    for m in model.modules():  # random dropout masks would differ between the two runs
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(twin, backend="eqiforge")
    args, kwargs = call_inputs(family, 0)
    for run in (model, compiled):
        run(*args, **kwargs).logits.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_gpt2_with_sdpa_at_batch_2_is_captured_by_the_fallback_path():
    _, opt = optimized("gpt2")
    assert opt.report.capture_fallback.startswith(
        "torch.export could not decompose it to core ATen (run_decompositions): ValueError: Cannot view a tensor")
    assert opt.report.capture_fallback.endswith("captured by AOTAutograd (aot_export_module)")
    assert "capture" in opt.report.summary()


def test_llama_keeps_grouped_query_attention_and_its_cache_passes_back_to_eager():
    model, opt = optimized("llama")
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    with torch.no_grad():
        args, _ = call_inputs("llama", 1)
        out, ref = opt(*args), model(*args)
        assert [layer.keys.shape[1] for layer in out.cache.layers] == [2]  # key/value heads, as eager's
        assert out.cache.get_seq_length() == ref.cache.get_seq_length() == SEQ
        step = ids(7, 1)
        torch.testing.assert_close(model(step, cache=out.cache).logits, model(step, cache=ref.cache).logits,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_greedy_decoding_with_the_cache_runs_one_plan_for_every_length_and_gives_eagers_tokens(family):
    """64 tokens: the first step's longer cache gets a plan of its own, the second's a plan for every cache
    length (issue 24); every call runs a plan."""
    model, opt = optimized(family)
    prompt, plans, calls = ids(3), opt.plans.builds, opt.calls
    with torch.no_grad():
        want = greedy(model, prompt, 64)
        got = greedy(opt, prompt, 64)
    assert torch.equal(got, want)
    assert opt.plans.builds - plans <= 2 and any(m.symbolic for m in opt.plans.values())
    assert opt.calls["plan"] - calls["plan"] == 64 and opt.calls["fallback"] == calls["fallback"]
