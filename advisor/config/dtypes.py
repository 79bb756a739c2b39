"""Dtype names and their sizes: the one table every reader of a dtype name uses.

Two vocabularies meet here:

* **torch's dtype names** (a tensor's dtype in an inventory, a Hugging Face config.json's
  ``torch_dtype`` / ``dtype``): :data:`TORCH_DTYPE_BYTES`, every ``torch.dtype`` attribute of torch
  2.13 with its ``itemsize`` (bytes per element, c10/core/ScalarType.h; the sub-byte ``int1``..
  ``uint7`` and ``bits*`` report 1), torch's aliases included (``float`` is ``float32``, ``half``
  ``float16``, ``long`` ``int64``...). tests/test_dtypes.py checks each against torch itself.
* **DeepSpeed's training dtypes** (fp32 / fp16 / bf16: the config's ``data_types`` and
  ``communication_data_type`` strings, ``--load-dtype``): :data:`TRAINING_DTYPE_BYTES`, read through
  the spellings DeepSpeed 0.19.8's ``DtypeEnum`` accepts (runtime/config.py l.144-149:
  ``fp16 = torch.float16, "torch.float16", "fp16", "float16", "half"`` ...), :data:`TRAINING_DTYPE_ALIASES`.

A name outside the table is refused where it is read (:func:`dtype_problem`), never read as a
default: "float1024" in an inventory or config.json used to pass silently (issue 21).
"""

from __future__ import annotations

from typing import Any, Literal

#: torch dtype name -> bytes per element (``torch.<name>.itemsize``, torch 2.13; aliases included).
TORCH_DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float": 4, "float64": 8, "double": 8, "float16": 2, "half": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "complex32": 4, "chalf": 4, "complex64": 8, "cfloat": 8, "complex128": 16, "cdouble": 16,
    "int8": 1, "int16": 2, "short": 2, "int32": 4, "int": 4, "int64": 8, "long": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
    "int1": 1, "int2": 1, "int3": 1, "int4": 1, "int5": 1, "int6": 1, "int7": 1,
    "uint1": 1, "uint2": 1, "uint3": 1, "uint4": 1, "uint5": 1, "uint6": 1, "uint7": 1,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
    "bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1, "bit": 1,
}

TrainingDtype = Literal["fp16", "bf16", "fp32"]

#: DeepSpeed's training dtypes -> bytes per element (fp32 4, fp16 and bf16 2).
TRAINING_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}

#: Every spelling DeepSpeed 0.19.8's DtypeEnum accepts for a training dtype (runtime/config.py
#: l.144-149), lower-case, -> the training dtype. (DtypeEnum's int8 is not a training dtype.)
TRAINING_DTYPE_ALIASES: dict[str, TrainingDtype] = {
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
}

#: torch dtype name -> the training dtype it is (the floating dtypes a model is trained in).
TORCH_TO_TRAINING: dict[str, TrainingDtype] = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
}

#: The torch dtype name of each training dtype (as ``str(torch.bfloat16).split(".")[1]`` gives it:
#: DeepSpeed names the parameter swap folder with it, partitioned_param_swapper.py l.85-86).
TRAINING_TO_TORCH: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def training_dtype(v: Any) -> TrainingDtype | None:
    """The training dtype a DeepSpeed config string names (any DtypeEnum spelling, case and
    surrounding space ignored), else None."""
    return TRAINING_DTYPE_ALIASES.get(v.strip().lower()) if isinstance(v, str) else None


def torch_dtype_name(v: Any) -> str | None:
    """The torch dtype name ``v`` gives (``"bfloat16"``, ``"torch.bfloat16"``), without the
    ``torch.`` prefix, when it is one of :data:`TORCH_DTYPE_BYTES`; else None."""
    if not isinstance(v, str):
        return None
    name = v.removeprefix("torch.")
    return name if name in TORCH_DTYPE_BYTES else None


def dtype_problem(v: Any, *, deepspeed_names: bool = False) -> str | None:
    """None when ``v`` is a torch dtype name (:func:`torch_dtype_name`) -- or, with
    ``deepspeed_names`` (an inventory's tensor dtype), any DtypeEnum spelling (``bf16``) -- else the
    words for the problem, naming the accepted names: the caller prefixes the file and key. A
    Hugging Face config.json takes torch's names only (from_pretrained: ``getattr(torch, name)``)."""
    if torch_dtype_name(v) is not None or (deepspeed_names and v in TRAINING_DTYPE_ALIASES):
        return None
    from advisor.config.validation import json_shown, shown
    what = f"unknown dtype {shown(v)}" if isinstance(v, str) else f"expected a dtype name, got {json_shown(v)}"
    return (f"{what} (one of torch's: {', '.join(TORCH_DTYPE_BYTES)}; optionally with the prefix torch."
            + ("; or DeepSpeed's fp32, fp16, bf16)" if deepspeed_names else ")"))
