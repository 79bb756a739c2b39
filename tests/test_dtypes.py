"""advisor.config.dtypes, the one table of dtype names and sizes, checked against its sources:
torch itself (each name's ``itemsize``, and every torch.dtype attribute listed) and DeepSpeed's
DtypeEnum (runtime/config.py l.144-149: the spellings of each training dtype)."""

from __future__ import annotations

import pytest

from advisor.config import dtypes


def test_torch_names_and_sizes_are_torchs():
    torch = pytest.importorskip("torch")
    have = {n: getattr(torch, n).itemsize for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    assert dtypes.TORCH_DTYPE_BYTES == have


def test_training_spellings_are_deepspeeds_dtype_enum():
    pytest.importorskip("torch")
    from deepspeed.runtime.config import DtypeEnum
    import torch
    want = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}
    for spelling, ours in dtypes.TRAINING_DTYPE_ALIASES.items():
        assert DtypeEnum(spelling).value is want[ours], spelling
    # every string spelling of those three members is in the table
    for member in (DtypeEnum.fp16, DtypeEnum.fp32, DtypeEnum.bf16):
        for v in member._all_values[1:]:
            assert dtypes.training_dtype(v) is not None, v
    for ours, torch_name in dtypes.TRAINING_TO_TORCH.items():
        assert getattr(torch, torch_name).itemsize == dtypes.TRAINING_DTYPE_BYTES[ours]
        assert dtypes.TORCH_TO_TRAINING[torch_name] == ours


@pytest.mark.parametrize("v", ["float1024", "", "bf16", "Float32", "torch.", 5, ["float32"]])
def test_a_name_outside_the_table_is_a_problem_naming_the_accepted_ones(v):
    p = dtypes.dtype_problem(v)
    assert p is not None and "bfloat16" in p and "float8_e4m3fn" in p


@pytest.mark.parametrize("v", ["float32", "torch.bfloat16", "int8", "float8_e4m3fn", "half"])
def test_torch_names_pass(v):
    assert dtypes.dtype_problem(v) is None


@pytest.mark.parametrize("cfg, want", [({"torch_dtype": "torch.bfloat16"}, "bf16"), ({"dtype": "float16"}, "fp16"),
                                       ({"torch_dtype": "float"}, "fp32"), ({"torch_dtype": "int8"}, None), ({}, None)])
def test_checkpoint_load_dtype_reads_the_table(cfg, want):
    """transformers' from_pretrained(dtype="auto") loads in the config's dtype (getattr(torch, name)):
    bfloat16 is DeepSpeed's bf16; a non-floating one is not a load dtype (None: fp32 assumed)."""
    from advisor.ledger.timeline import checkpoint_load_dtype
    assert checkpoint_load_dtype(cfg) == want


def test_deepspeed_spellings_only_where_asked():
    """An inventory may name a tensor's dtype as DeepSpeed does (bf16); a config.json may not
    (transformers reads it with getattr(torch, name), and torch has no bf16)."""
    torch = pytest.importorskip("torch")
    assert not hasattr(torch, "bf16")
    assert dtypes.dtype_problem("bf16") is not None
    assert dtypes.dtype_problem("bf16", deepspeed_names=True) is None


def test_the_inventory_schema_lists_the_names_the_reader_takes():
    """schemas/inventory.schema.json's dtype enum is the set the inventory reader accepts."""
    import json
    from pathlib import Path
    from advisor.model.inventory import _INVENTORY_DTYPES
    schema = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "inventory.schema.json").read_text())
    def find(d):
        if isinstance(d, dict):
            if "dtype" in d and isinstance(d["dtype"], dict) and "enum" in d["dtype"]:
                return d["dtype"]["enum"]
            for v in d.values():
                if (r := find(v)) is not None:
                    return r
        return None
    assert set(find(schema)) == set(_INVENTORY_DTYPES)
