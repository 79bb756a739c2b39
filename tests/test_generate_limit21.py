"""Issue 21, genlim21: generate's own work limit (advisor.config.validation.MAX_GENERATE_TENSORS). Its
second one, MAX_GENERATE_MICRO_BATCHES (64 divisors of the sequences per rank), went with mb21's search by
pieces (tests/test_generate_micro_pieces21.py: the plans fitted grow with log divisors, not divisors).

generate builds a ledger per ZeRO stage/offload and layout, each walking every tensor, so it refuses a
model of more parameter tensors than its limit before any plan is built (exit 2, one line naming the
model, the count, the limit and what to run instead); estimate and check keep their own limits.
The tensor counts asserted are counted by hand from transformers' modeling code (named_parameters):

* LlamaForCausalLM (transformers/models/llama/modeling_llama.py): model.embed_tokens, model.norm and an
  untied lm_head, plus per LlamaDecoderLayer self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
  input_layernorm, post_attention_layernorm -> 9 L + 3 tensors (no biases: attention_bias and
  mlp_bias default False).
* DeepseekV3ForCausalLM (transformers 4.x, modeling_deepseek_v3.py, one module per expert): per layer
  self_attn.{q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}
  and the two norms (9); a dense layer's mlp.{gate,up,down}_proj (3); a MoE layer's 3 per routed expert,
  mlp.gate.weight, mlp.gate.e_score_correction_bias and shared_experts.{gate,up,down}_proj (5).
"""

from __future__ import annotations

import json

import pytest

from advisor.config.validation import MAX_GENERATE_TENSORS, generate_tensors_problem
from advisor.errors import AdvisorError, WorkLimitError
from tests.conftest import run_cli

HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128}
ARCH = {"family": "llama", "hidden_size": 64, "num_layers": 32, "num_heads": 4, "num_kv_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000, "max_seq_len": 128}
GEN = ["generate", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8",
       "--seq-len", "128"]


def _llama_layers_over_limit() -> int:
    """The fewest llama layers whose 9 L + 3 tensors pass the limit."""
    return (MAX_GENERATE_TENSORS - 3) // 9 + 1


def _inventory_file(path, n: int) -> None:
    with path.open("w") as out:  # nameless [64, 64] tensors, as benchmarks/bounds.py's MAX_TENSORS row
        out.write('{"meta": ' + json.dumps(ARCH) + ', "tensors": [' + ",".join(['{"shape": [64, 64]}'] * n) + "]}")


def test_the_counting_function_takes_the_limit_and_refuses_one_more():
    assert generate_tensors_problem(MAX_GENERATE_TENSORS, "m") is None
    msg = generate_tensors_problem(MAX_GENERATE_TENSORS + 1, "m")
    assert msg is not None and "\n" not in msg
    assert f"{MAX_GENERATE_TENSORS + 1:,} parameter tensors" in msg and f"limit of {MAX_GENERATE_TENSORS:,}" in msg


def test_the_message_names_estimate_and_checks_own_limits():
    """What to run instead, with the limits those commands keep (each defined once elsewhere)."""
    from advisor.model.inventory import MAX_TENSORS
    from advisor.model.specs import MAX_LAYERS
    msg = generate_tensors_problem(MAX_GENERATE_TENSORS + 1, "m")
    assert "estimate or check" in msg
    assert f"{MAX_TENSORS:,} tensors" in msg and f"{MAX_LAYERS:,} layers" in msg
    assert MAX_GENERATE_TENSORS < MAX_TENSORS


def test_config_json_one_layer_over_the_limit_is_refused_exit_2(tmp_path):
    L = _llama_layers_over_limit()
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**HF, "num_hidden_layers": L}))
    p = run_cli([*GEN, "--model", str(f)])
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    assert str(f) in lines[0] and f"{9 * L + 3:,} parameter tensors" in lines[0]
    assert f"{MAX_GENERATE_TENSORS:,}" in lines[0] and "estimate or check" in lines[0]
    assert p.stdout == ""


def test_config_json_at_the_limit_is_counted_within_it(tmp_path):
    """One layer fewer: the inventory generate builds has 9 (L - 1) + 3 tensors, within the limit; search
    itself is not run here (its cost is the benchmark's: benchmarks/bounds.py "generate at its limit")."""
    from advisor.model.specs import resolve_model
    L = _llama_layers_over_limit() - 1
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**HF, "num_hidden_layers": L}))
    inv = resolve_model(str(f), architecture=True)
    assert len(inv.tensors) == 9 * L + 3 <= MAX_GENERATE_TENSORS
    assert generate_tensors_problem(len(inv.tensors), inv.name) is None


def test_search_refuses_before_any_plan(tmp_path, monkeypatch):
    """search() itself (the API path) refuses an inventory over the limit with WorkLimitError, before
    the first plan's fit is computed."""
    from advisor.model.specs import resolve_model
    from advisor.views import estimate, generate as gen
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**HF, "num_hidden_layers": _llama_layers_over_limit()}))
    inv = resolve_model(str(f))
    monkeypatch.setattr(estimate, "plan_fit", lambda *a, **k: pytest.fail("a plan was fitted before the refusal"))
    with pytest.raises(WorkLimitError) as e:
        gen.search(inv, None, gen.Request(global_batch=8, seq_len=128, nodes=1, gpus_per_node=8))
    assert f"limit of {MAX_GENERATE_TENSORS:,}" in str(e.value)


def test_inventory_file_over_the_limit_is_refused_before_its_tensors_are_built(tmp_path, monkeypatch):
    from advisor.model import specs
    f = tmp_path / "inv.json"
    _inventory_file(f, MAX_GENERATE_TENSORS + 1)
    monkeypatch.setattr(specs, "from_dict", lambda *a, **k: pytest.fail("built before the refusal"))
    with pytest.raises(AdvisorError) as e:
        specs.resolve_model(str(f), architecture=True)
    assert f"{MAX_GENERATE_TENSORS + 1:,} parameter tensors" in str(e.value) and str(f) in str(e.value)
    p = run_cli([*GEN, "--model", str(f)])
    assert p.returncode == 2 and len([x for x in p.stderr.splitlines() if x.strip()]) == 1, p.stderr[-500:]


def test_inventory_file_at_the_limit_is_read(tmp_path):
    from advisor.model.specs import resolve_model
    f = tmp_path / "inv.json"
    _inventory_file(f, MAX_GENERATE_TENSORS)
    assert len(resolve_model(str(f), architecture=True).tensors) == MAX_GENERATE_TENSORS


def test_estimate_keeps_its_own_limit(tmp_path):
    """The model generate refuses is one estimate takes (its limits are MAX_TENSORS tensors / 100,000 layers)."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**HF, "num_hidden_layers": _llama_layers_over_limit()}))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 3}}))
    p = run_cli(["estimate", str(cfg), "--model", str(f), "--world-size", "8", "--seq-len", "128"])
    assert p.returncode == 0, p.stderr[-500:]


@pytest.mark.parametrize("experts, first_dense, expected", [
    (256, 3, 9 * 61 + 3 * 3 + 58 * (256 * 3 + 5) + 3),   # DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json)
    (384, 1, 9 * 61 + 1 * 3 + 60 * (384 * 3 + 5) + 3),   # Kimi-K2 (moonshotai/Kimi-K2-Instruct config.json)
], ids=["deepseek-v3", "kimi-k2"])
def test_real_per_expert_moe_models_are_not_refused(tmp_path, experts, first_dense, expected):
    """The largest real models of the families here, one module per expert (transformers 4): within the limit.
    The presets (fused experts) have at most 1,137 tensors."""
    from advisor.model.specs import get_preset, preset_names, resolve_model
    d = get_preset("deepseek-v3").to_dict()
    d.update(name="per-expert", expert_layout="per_expert", num_experts=experts, first_dense_layers=first_dense)
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(d))
    inv = resolve_model(str(f), architecture=True)
    assert len(inv.tensors) == expected
    assert generate_tensors_problem(len(inv.tensors), inv.name) is None
    assert max(len(resolve_model(n).tensors) for n in preset_names()) < MAX_GENERATE_TENSORS
