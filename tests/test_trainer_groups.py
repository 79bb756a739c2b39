"""The HF Trainer's two param groups (decay / no-decay) under ``--hf`` with no optimizer block
(advisor.config.hf.trainer_no_decay / trainer_param_groups, applied once by planning.build_plan).

The no-decay set ds-advisor assumes is checked against transformers' own function,
``Trainer.get_decay_parameter_names`` (transformers 5.25.0 trainer.py l.1423-1433), run on the real module
transformers builds for each model type ds-advisor supports (tests/hf_small.py's configs, on the meta device).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from advisor.config.hf import trainer_no_decay, trainer_param_groups
from advisor.config.loading import parse_text
from advisor.model.inventory import LayerTensorSpec, TensorSpec, from_dict
from advisor.model.specs import expand, get_preset, resolve_model
from advisor.plan import Cluster
from advisor.planning import build_plan

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_small import SMALL  # noqa: E402

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None


def _hf_module(model_type: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = {k: v for k, v in SMALL[model_type].items() if k != "model_type"}
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg))


def _transformers_no_decay(model) -> set[str]:
    """The Trainer's own split: create_optimizer's no-decay group is every trainable parameter whose name
    get_decay_parameter_names does not give (transformers 5.25.0 trainer.py l.1285-1300)."""
    from transformers import Trainer
    decay = set(Trainer.get_decay_parameter_names(None, model))  # uses no Trainer state
    return {n for n, p in model.named_parameters() if n not in decay and p.requires_grad}


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed (test extra)")
@pytest.mark.parametrize("model_type", sorted(SMALL))
def test_no_decay_set_is_transformers(model_type, tmp_path):
    model = _hf_module(model_type)
    want = _transformers_no_decay(model)
    assert want, model_type  # every supported model has a norm or a bias
    # what estimate --hf reads: ds-advisor's own inventory of the config.json
    p = tmp_path / "config.json"
    p.write_text(json.dumps(SMALL[model_type]))
    inv = resolve_model(str(p))
    hf_names = {n for n, _ in model.named_parameters()}
    # DeepSeek-V3's router score bias is a parameter in ds-advisor's inventory (DeepSeek's code), a buffer in
    # transformers: no param group of the Trainer holds it (tests/test_models.py says the same)
    ours = {t.name for t, nd in zip(inv.tensors, trainer_no_decay(inv.tensors)) if nd and t.name in hf_names}
    assert ours == want
    # and the rule on the real module's own names and shapes, in its order
    real = [TensorSpec(n, tuple(q.shape)) for n, q in model.named_parameters()]
    assert {t.name for t, nd in zip(real, trainer_no_decay(real)) if nd} == want


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed (test extra)")
@pytest.mark.parametrize("model_type", sorted(SMALL))
def test_no_decay_set_is_transformers_over_repeated_layers(model_type, tmp_path):
    """The shortcut over identical layers (issue 21: trainer_no_decay with the inventory's LayerRepeat answers
    every middle layer as layer 1), as build_plan takes it, against transformers' own split of the real module
    at 5 layers: the first, three middle ones and the last, so layer boundaries on both sides are crossed."""
    from advisor.model.parallel import layer_repeat
    cfg = dict(SMALL[model_type])
    keys = [k for k in ("num_hidden_layers", "n_layer") if k in cfg] or ["num_hidden_layers"]
    cfg.update({k: 5 for k in keys})
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    inv = resolve_model(str(p))
    rep = layer_repeat(inv)
    assert rep is not None and rep.count >= 3, (model_type, rep)  # the shortcut is taken
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(
            model_type, **{k: v for k, v in cfg.items() if k != "model_type"}))
    want = _transformers_no_decay(model)
    hf_names = {n for n, _ in model.named_parameters()}
    groups = trainer_param_groups({}, inv.tensors, repeat=lambda: rep)
    assert {t.name for t, g in zip(inv.tensors, groups) if g == 1 and t.name in hf_names} == want
    # and the planned inventory keeps its layer repeat only with groups that repeat with the layers
    planned = inv.regrouped(groups)
    assert {t.name for t in planned.tensors if t.group == 1 and t.name in hf_names} == want


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed (test extra)")
def test_layernorm_by_class_only():
    """GPT-2's LayerNorm weights (ln_1, ln_2, ln_f) match no name pattern: transformers leaves them out of the
    decay group by their class, ds-advisor by their (1-D weight, 1-D bias) signature; a module with a 1-D
    weight alone (an RMSNorm) named outside the patterns is decay on both sides."""
    import torch
    from torch import nn
    model = _hf_module("gpt2")
    by_class = {n for n, _ in model.named_parameters() if n.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))}
    assert by_class and by_class <= _transformers_no_decay(model)

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(4))

    m = nn.ModuleDict({"lin": nn.Linear(4, 4, bias=False), "scale": Scale(), "ln": nn.LayerNorm(4)})
    want = _transformers_no_decay(m)
    assert want == {"ln.weight", "ln.bias"}
    real = [TensorSpec(n, tuple(q.shape)) for n, q in m.named_parameters()]
    assert {t.name for t, nd in zip(real, trainer_no_decay(real)) if nd} == want


def _biasless_layernorm_model():
    """A module the guess cannot read: nn.LayerNorm(bias=False) (MPT, OLMo, some Llama-likes) under names no
    pattern matches (``ln_attn``, ``final``), beside an RMSNorm-like 1-D weight (``scale``: decay for the Trainer)
    and a subclass of nn.LayerNorm with its bias (``sub``: no-decay by isinstance)."""
    import torch
    from torch import nn

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(8))

    class MyLN(nn.LayerNorm):
        pass

    block = nn.ModuleDict({"ln_attn": nn.LayerNorm(8, bias=False), "proj": nn.Linear(8, 8, bias=False),
                           "scale": Scale(), "sub": MyLN(8)})
    return nn.ModuleDict({"h": nn.ModuleList([block]), "final": nn.LayerNorm(8, bias=False),
                          "head": nn.Linear(8, 4, bias=False)})


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers not installed (test extra)")
def test_biasless_layernorm_by_class_from_real_modules():
    """Where the inventory comes from the real modules (from_module records which parameters sit inside an
    nn.LayerNorm), the no-decay set is transformers' own, get_decay_parameter_names on the same module
    (``isinstance(child, nn.LayerNorm)``, trainer_pt_utils.py l.1361): the bias-less LayerNorms' weights are
    no-decay though no name pattern matches them. From names and shapes alone (a config.json spec, a hand-written
    inventory) the guess misses them: the case trainer_no_decay's docstring names."""
    from advisor.model.inventory import from_module, layernorm_names
    m = _biasless_layernorm_model()
    want = _transformers_no_decay(m)
    assert {"h.0.ln_attn.weight", "final.weight"} <= want and "h.0.scale.weight" not in want
    inv = from_module(m)
    assert {t.name for t, nd in zip(inv.tensors, trainer_no_decay(inv.tensors, layernorm=layernorm_names(inv)))
            if nd} == want
    groups = trainer_param_groups({}, inv.tensors, layernorm=layernorm_names(inv))
    assert {t.name for t, g in zip(inv.tensors, groups) if g == 1} == want
    # as build_plan applies it under --hf, and through the inventory file from_module's inventory is saved as
    plan = _plan(NO_BLOCK, inv)
    assert {t.name for t in plan.inventory.tensors if t.group == 1} == want
    back = from_dict(json.loads(json.dumps(inv.to_dict())), "inv.json")
    assert {t.name for t in _plan(NO_BLOCK, back).inventory.tensors if t.group == 1} == want
    # without the record (names and shapes only) the guess puts the bias-less weights in the decay group
    guessed = {t.name for t, nd in zip(inv.tensors, trainer_no_decay(inv.tensors)) if nd}
    assert want - guessed == {"h.0.ln_attn.weight", "final.weight"}


def test_layernorm_record_is_checked():
    """A hand-written inventory's layernorm_params of the wrong type is a one-line error naming the key."""
    from advisor.errors import ModelSpecError
    from advisor.model.specs import checked_meta
    with pytest.raises(ModelSpecError, match=r"inv.json: /meta/layernorm_params: expected an array"):
        checked_meta({"layernorm_params": "ln.weight"}, "inv.json")


def _plan(cfg: dict, inv, world: int = 2, hf: bool = True):
    return build_plan(parse_text(json.dumps(cfg), "ds.json"), inv, Cluster(world_size=world), hf=hf)


NO_BLOCK = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


def test_hf_plan_has_the_trainers_groups():
    """gpt2 by hand: per layer ln_1 (w, b), c_attn.bias, c_proj.bias, ln_2 (w, b), c_fc.bias, mlp c_proj.bias
    no-decay (8 tensors), the 4 Conv1D weights decay; wte, wpe decay; ln_f (w, b) no-decay."""
    inv = expand(get_preset("gpt2"))
    plan = _plan(NO_BLOCK, inv)
    groups = plan.inventory.groups()
    assert len(groups) == 2
    L, h = 12, 768
    assert len(groups[1]) == 8 * L + 2 and len(groups[0]) == 4 * L + 2
    assert sum(t.numel for t in groups[1]) == L * (4 * h + 3 * h + h + 4 * h + h) + 2 * h
    assert sum(t.numel for t in groups[0]) + sum(t.numel for t in groups[1]) == inv.numel
    assert all(t.group == 0 for t in inv.tensors)  # the caller's inventory is left as it was
    # the layer copies stay LayerTensorSpecs (shared prefix / suffix: issue 21's memory)
    moved = [t for t in plan.inventory.tensors if t.name.startswith("transformer.h.5.") and t.group == 1]
    assert moved and all(isinstance(t, LayerTensorSpec) for t in moved)
    note = plan.config.optimizer.client_note
    assert "two param groups (decay / no-decay)" in note


def test_optimizer_block_keeps_one_group():
    """With an optimizer block the Trainer passes the flat list of trainable parameters (DummyOptim): one group."""
    inv = expand(get_preset("gpt2"))
    cfg = dict(NO_BLOCK, optimizer={"type": "AdamW", "params": {"lr": 1e-4}})
    assert len(_plan(cfg, inv).inventory.groups()) == 1
    assert len(_plan(NO_BLOCK, inv, hf=False).inventory.groups()) == 1  # without --hf: nothing of the Trainer's


def test_empty_no_decay_group_is_dropped():
    """A model without biases or norms: the Trainer's no-decay group is empty, and DeepSpeed 0.19.8 drops an
    empty param group (engine.py l.2348): one group, all of it decay."""
    inv = from_dict({"name": "nobias", "tensors": [{"name": "l1.weight", "shape": [8, 4]},
                                                    {"name": "l2.weight", "shape": [2, 8]}]}, "t")
    assert trainer_param_groups({}, inv.tensors) == [0, 0]
    assert len(_plan(NO_BLOCK, inv).inventory.groups()) == 1


def test_given_groups_are_kept():
    """An inventory already in param groups (from a live optimizer) is kept as given; frozen tensors keep theirs."""
    inv = from_dict({"name": "given", "tensors": [{"name": "a.weight", "shape": [8, 4]},
                                                   {"name": "a.bias", "shape": [8], "group": 1},
                                                   {"name": "b.bias", "shape": [8], "group": 1}]}, "t")
    assert trainer_param_groups({}, inv.tensors) is None
    plan = _plan(NO_BLOCK, inv)
    assert plan.inventory is inv
    assert "the inventory's own param groups" in plan.config.optimizer.client_note
    frozen = from_dict({"name": "frozen", "tensors": [{"name": "a.weight", "shape": [8, 4]},
                                                      {"name": "a.bias", "shape": [8], "trainable": False}]}, "t")
    assert trainer_param_groups({}, frozen.tensors) == [0, 0]


def test_lint_sizes_zero3_sub_groups_by_the_trainers_groups():
    """Lint's rules that size ZeRO-3 sub-groups (M002, O008, O009) read the plan's model: under --hf without an
    optimizer block the Trainer's two param groups, and ZeRO-3 makes sub-groups per param group (stage3.py
    _create_fp16_sub_groups, per ``self.fp16_groups`` entry). gpt2 at W 1 with the default sub_group_size 1e9:
    two sub-groups (each group is under 1e9 elements), not one, and M002's largest sub-group is the decay group,
    all parameters less the no-decay ones counted by hand as in test_hf_plan_has_the_trainers_groups."""
    from advisor.views.lint import lint_config

    inv = expand(get_preset("gpt2"))
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}}
    loaded = parse_text(json.dumps(cfg), "ds.json")
    plan = build_plan(loaded, inv, Cluster(world_size=1), hf=True)
    (m002,) = [f for f in lint_config(loaded, world_size=1, dp_world_size=1, inventory=inv, hf=True, plan=plan)
               if f.code == "M002"]
    L, h = 12, 768
    no_decay = L * (4 * h + 3 * h + h + 4 * h + h) + 2 * h
    assert m002.data["sub_groups"] == 2
    assert f"x {inv.numel - no_decay} elements" in m002.message, m002.message
