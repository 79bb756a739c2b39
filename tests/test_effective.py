"""The effective config against DeepSpeed 0.19.8's own parsers.

Each corpus config is read by our ``effective_config`` and by DeepSpeed's section parsers
(``runtime/zero/config.py get_zero_config``, ``runtime/precision_config.py``,
``runtime/config.py get_gradient_clipping``); the values the ledger depends on must agree.
Skipped when deepspeed is not installed.
"""

from __future__ import annotations

import pytest

from advisor.config.effective import derive_batch, effective_config
from advisor.config.loading import load_config
from tests.conftest import CORPUS

CORPUS_FILES = [f for f in sorted(CORPUS.iterdir()) if f.suffix not in (".tsv", ".md")]


def _ds():
    pytest.importorskip("torch")
    return pytest.importorskip("deepspeed")


def _assert_lint_errs_in(path, sections: tuple[str, ...], rejection: Exception) -> None:
    """DeepSpeed's own parser refused ``sections`` of ``path``: lint reports an error there."""
    from advisor.views.lint import lint_config

    errs = [(f.code, f.pointer) for f in lint_config(load_config(str(path))) if f.severity == "error"]
    assert any(ptr.startswith(sections) for _, ptr in errs), (path.name, str(rejection)[:300], errs)


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name[:60])
def test_effective_config_matches_deepspeed_parsers(path):
    _ds()
    from deepspeed.runtime.config import get_gradient_clipping
    from deepspeed.runtime.precision_config import get_bfloat16_config, get_float16_config
    from deepspeed.runtime.zero.config import get_zero_config

    raw = load_config(str(path)).data
    ours = effective_config(raw)
    try:
        z = get_zero_config(raw)
    except Exception as e:  # DeepSpeed refuses the section: lint must say so, with an error in it
        _assert_lint_errs_in(path, ("/zero_optimization",), e)
        return
    assert ours.zero.stage == int(z.stage)
    assert ours.zero.overlap_comm == bool(z.overlap_comm)
    assert ours.zero.reduce_bucket_size == z.reduce_bucket_size
    assert ours.zero.contiguous_gradients == z.contiguous_gradients
    assert ours.zero.sub_group_size == z.sub_group_size
    assert ours.zero.prefetch_bucket_size == z.prefetch_bucket_size
    assert ours.zero.param_persistence_threshold == z.param_persistence_threshold
    assert ours.zero.max_live_parameters == z.max_live_parameters
    assert ours.zero.max_reuse_distance == z.max_reuse_distance
    od = getattr(z.offload_optimizer.device, "value", z.offload_optimizer.device) if z.offload_optimizer is not None else "none"
    pd = getattr(z.offload_param.device, "value", z.offload_param.device) if z.offload_param is not None else "none"
    assert ours.zero.offload_optimizer.device == od
    assert ours.zero.offload_param.device == pd
    if z.offload_optimizer is not None:
        assert ours.zero.offload_optimizer.pin_memory == z.offload_optimizer.pin_memory
        assert ours.zero.offload_optimizer.buffer_count == z.offload_optimizer.buffer_count
    if z.offload_param is not None:
        assert ours.zero.offload_param.pin_memory == z.offload_param.pin_memory
        assert ours.zero.offload_param.buffer_size == z.offload_param.buffer_size
        assert ours.zero.offload_param.buffer_count == z.offload_param.buffer_count
        assert ours.zero.offload_param.max_in_cpu == z.offload_param.max_in_cpu
    try:
        fp16 = get_float16_config(raw)
        bf16 = get_bfloat16_config(raw)
    except Exception as e:
        _assert_lint_errs_in(path, ("/fp16", "/bf16", "/bfloat16"), e)
        return
    assert ours.fp16_enabled == bool(fp16.enabled)
    assert ours.bf16_enabled == bool(bf16.enabled)
    gc = raw.get("gradient_clipping")
    if gc != "auto" and not isinstance(gc, str):
        assert ours.gradient_clipping == get_gradient_clipping(raw)


def test_defaults_are_those_of_0_19_8():
    ec = effective_config({})
    assert ec.gradient_clipping == 1.0  # runtime/constants.py GRADIENT_CLIPPING_DEFAULT
    assert ec.zero.stage == 0 and ec.zero.overlap_comm is False
    assert ec.zero.offload_param.pin_memory is True and ec.zero.offload_optimizer.pin_memory is True
    assert effective_config({"zero_optimization": {"stage": 3}}).zero.overlap_comm is True


def test_auto_inside_validated_section_means_default():
    ec = effective_config({"bf16": {"enabled": "auto"}, "zero_optimization": {"reduce_bucket_size": "auto"}})
    assert ec.bf16_enabled is False and ec.zero.reduce_bucket_size == 500_000_000
    assert {n.pointer for n in ec.notes} >= {"/bf16/enabled", "/zero_optimization/reduce_bucket_size"}


def test_deprecated_aliases():
    ec = effective_config({"zero_optimization": {"stage": 2, "cpu_offload": True}, "bfloat16": {"enabled": True}})
    assert ec.zero.offload_optimizer.device == "cpu" and ec.offload_optimizer_effective == "cpu"
    assert ec.bf16_enabled and ec.model_dtype == "bf16"
    assert effective_config({"zero_optimization": True}).zero.stage == 1


def test_stage_rules_for_offload():
    assert effective_config({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}
                            ).offload_param_effective == "none"
    assert effective_config({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme"}}}
                            ).offload_optimizer_effective == "cpu"
    ec = effective_config({"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"},
                           "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme"}}})
    assert ec.offload_optimizer_effective == "none"  # BF16_Optimizer ignores the block


@pytest.mark.parametrize("tb,mb,ga,w,expect_ok,derived", [
    (64, 2, 4, 8, True, (64, 2, 4)),
    (64, 2, None, 8, True, (64, 2, 4)),
    (None, 2, 4, 8, True, (64, 2, 4)),
    (7, 2, None, 1, False, (7, 2, 3)),   # ga = 7 // 2 // 1 = 3 -> 6 != 7 (DeepSpeed's floor division)
    (64, 2, 4, 4, False, (64, 2, 4)),
    (32, None, None, 4, True, (32, 8, 1)),
])
def test_batch_rule(tb, mb, ga, w, expect_ok, derived):
    ec = effective_config({k: v for k, v in (("train_batch_size", tb), ("train_micro_batch_size_per_gpu", mb),
                                             ("gradient_accumulation_steps", ga)) if v is not None})
    t, m, g, err = derive_batch(ec, w)
    assert (t, m, g) == derived
    assert (err is None) == expect_ok
