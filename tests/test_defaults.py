"""The one table of DeepSpeed defaults (advisor.config.defaults) against DeepSpeed 0.19.8's own
pydantic config models and constants, and its HF hidden-size values against transformers' own
``HfTrainerDeepSpeedConfig.trainer_config_finalize``: an independent check (the installed
packages' code, not ours). Skips when deepspeed / transformers are not installed."""

from __future__ import annotations

import enum
import types

import pytest

from advisor.config import defaults as D
from advisor.config.effective import effective_config

#: Fields of DeepSpeedZeroConfig that have no plain default (a default_factory): not tabulated.
UNTABULATED = {"leaf_module"}


def _models():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                       DeepSpeedZeroOffloadParamConfig)
    return [(D.ZERO, DeepSpeedZeroConfig), (D.OFFLOAD_PARAM, DeepSpeedZeroOffloadParamConfig),
            (D.OFFLOAD_OPTIMIZER, DeepSpeedZeroOffloadOptimizerConfig), (D.FP16, DeepSpeedFP16Config),
            (D.BF16, DeepSpeedBF16Config)]


def _plain(v):
    return v.value if isinstance(v, enum.Enum) else v


def test_every_pydantic_field_is_in_the_table_with_deepspeeds_default_alias_and_deprecation():
    for table, model in _models():
        ours = {d.field: d for d in table.fields}
        theirs = {n: f for n, f in model.model_fields.items() if n not in UNTABULATED}
        assert set(ours) == set(theirs), (table.path, set(ours) ^ set(theirs))
        assert table.source.endswith(model.__name__)
        for name, f in theirs.items():
            d = ours[name]
            assert not f.is_required(), (model.__name__, name)
            got = _plain(f.default)
            assert type(got) is type(d.value) or (isinstance(got, int) and isinstance(d.value, int)), (name, got)
            assert got == d.value, (model.__name__, name, got, d.value)
            assert f.alias == d.alias, (model.__name__, name, f.alias, d.alias)
            extra = f.json_schema_extra or {}
            assert bool(extra.get("deprecated")) == bool(d.replaced_by), (model.__name__, name)
            if d.replaced_by:
                assert extra.get("new_param") == d.replaced_by, (model.__name__, name)


def test_aio_top_level_and_legacy_section_constants():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime import constants as rc
    from deepspeed.runtime import precision_config as pc
    from deepspeed.runtime.swap_tensor import constants as sc
    for d in D.AIO.fields:
        assert getattr(sc, f"AIO_{d.field.upper()}_DEFAULT") == d.value, d.field
    assert rc.GRADIENT_CLIPPING_DEFAULT == D.TOP.value("gradient_clipping")
    assert rc.GRADIENT_PREDIVIDE_FACTOR_DEFAULT == D.TOP.value(rc.GRADIENT_PREDIVIDE_FACTOR)
    assert rc.PRESCALE_GRADIENTS_DEFAULT is D.TOP.value(rc.PRESCALE_GRADIENTS)
    assert (rc.CHECKPOINT, rc.CHECKPOINT_PARALLEL_WRITE) == D.CHECKPOINT_PARALLEL_WRITE.path
    assert rc.CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE_DEFAULT is D.CHECKPOINT_PARALLEL_WRITE.value(
        rc.CHECKPOINT_PARALLEL_WRITE_PIPELINE_STAGE)
    assert D.LEGACY_SECTIONS == {pc.BFLOAT16_OLD: pc.BFLOAT16}


def test_deepspeed_parses_an_empty_section_to_the_tables_defaults():
    """DeepSpeed's own parse of {} (what a config without the section gets) against what the
    effective config reads from an empty config: same defaults, through both paths."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    ds = DeepSpeedZeroConfig()
    ec = effective_config({}).zero
    for name in ("contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
                 "allgather_bucket_size", "sub_group_size", "prefetch_bucket_size", "param_persistence_threshold",
                 "model_persistence_threshold", "max_live_parameters", "max_reuse_distance",
                 "gather_16bit_weights_on_model_save", "round_robin_gradients", "parameter_alignment",
                 "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
                 "allgather_sequential", "overlap_comm", "memory_efficient_linear"):
        assert _plain(getattr(ds, name)) == getattr(ec, name), name
    assert int(ds.stage) == ec.stage


def test_table_lookup_takes_every_spelling():
    assert D.ZERO["stage3_prefetch_bucket_size"] is D.ZERO["prefetch_bucket_size"]
    with pytest.raises(KeyError):
        D.ZERO["no_such_key"]


@pytest.mark.parametrize("stage", [2, 3])
def test_hidden_size_values_match_transformers_trainer_config_finalize(stage):
    pytest.importorskip("deepspeed")
    ti = pytest.importorskip("transformers.integrations.deepspeed")
    h = 4096
    zero = {"stage": stage, **{k.split(".", 1)[1]: "auto" for k in D.HIDDEN_SIZE_KEYS}}
    hf = ti.HfTrainerDeepSpeedConfig({"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero})
    args = types.SimpleNamespace(get_warmup_steps=lambda n: 0)
    model = types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=h))
    hf.trainer_config_finalize(args, model, 10)
    ours = D.hidden_size_values(h)
    for key in D.HIDDEN_SIZE_KEYS:
        got = hf.get_value(key)
        if stage == 3 or key == D.HIDDEN_SIZE_KEYS[0]:
            assert got == ours[key], (key, got, ours[key])
        else:
            assert got == "auto"  # the Trainer fills the stage-3 keys only at stage 3
