"""The text report's activation line, M100's activation words and the timeline's save_16bit_model label
against the JSON of the same run (newcomer findings 4-6, session 19): each printed part is read back
from the text and must add up to the printed total, which must be the JSON's row; the in-flight
count is computed here from DeepSpeed's 1F1B rule (runtime/pipe/schedule.py TrainSchedule.num_pipe_buffers,
l.247-256: min(stages - stage_id, micro_batches) forwards before the first backward)."""

from __future__ import annotations

import json
import re

from tests.conftest import SAMPLES, run_cli

GIB = 2 ** 30
WIDE = {"COLUMNS": "200"}  # fewer folds; folded lines are joined back

#: Newcomer finding 4: llama-3-70b, 2 pipeline stages x TP 4 x DP 4, micro-batch 4 (zero2.json), global 32.
PP_ARGS = [str(SAMPLES / "zero2.json"), "--model", "llama-3-70b", "--world-size", "32", "--tensor-parallel", "4",
           "--pipeline-parallel", "2", "--seq-len", "4096", "--set", "zero_optimization.stage=1",
           "--set", "train_batch_size=32"]
#: Newcomer finding 5: the README's first command.
README_ARGS = [str(SAMPLES / "zero3_cpu_offload.json"), "--model", "llama-3-8b", "--world-size", "8",
               "--gpu-memory", "80GB"]


def _estimate(args: list[str]) -> tuple[str, dict]:
    text = run_cli(["estimate", *args], env=WIDE)
    js = run_cli(["estimate", *args, "--format", "json"], env=WIDE)
    assert js.returncode in (0, 1), js.stderr
    return text.stdout, json.loads(js.stdout)


def _unparen(s: str) -> str:
    """``s`` without its parenthesised asides (nested ones too): the numbers outside them are the sum's."""
    out, depth = [], 0
    for ch in s:
        depth += ch == "("
        if not depth:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


def _gib(s: str) -> float:
    return float(s.replace(",", ""))


def _activation_lines(text: str) -> list[str]:
    """Each "  activations: " line with its folded continuation lines (a deeper indent) joined back."""
    out: list[str] = []
    lines = text.splitlines()
    for i, x in enumerate(lines):
        if x.startswith("  activations: "):
            parts = [x.strip()]
            for y in lines[i + 1:]:
                if not y.startswith("      "):
                    break
                parts.append(y.strip())
            out.append(" ".join(parts))
    return out


def _state_rows(text: str) -> list[float]:
    """The state tables' accelerator activations cell, one per role in print order."""
    return [_gib(x.split("│")[2]) for x in text.splitlines() if x.startswith("│ activations ")]


def _save16(args: list[str]) -> tuple[str, dict]:
    d = json.loads(run_cli(["estimate", *args, "--format", "json"], env=WIDE).stdout)
    label = next(x["label"] for x in d["ranks"][0]["timeline"] if x["instant"] == "save:16bit")
    return label, d["checkpoint"]["save_16bit_model"]


def test_save_16bit_label_agrees_with_the_checkpoint_section():
    """ZeRO-3 without stage3_gather_16bit_weights_on_model_save: DeepSpeed's save_16bit_model returns False
    before writing (runtime/engine.py l.5730-5740; run on the engine in tests/engine/test_save_parity.py's
    z3_bf16_save_w2): the timeline says so with the checkpoint section's own reason."""
    base = [str(SAMPLES / "zero3_cpu_offload.json"), "--params", "100000000", "--world-size", "8"]
    label, s16 = _save16(base)
    assert s16["writes"] is False and "writes nothing" in label and "writes the module state dict" not in label
    reason = s16["note"].split(";")[0]
    assert "stage3_gather_16bit_weights_on_model_save" in reason and reason in label
    label, s16 = _save16(base + ["--set", "zero_optimization.stage3_gather_16bit_weights_on_model_save=true"])
    assert s16["writes"] is True and s16["gather_accelerator_bytes"] > 0 and "gathered" in label
    label, s16 = _save16([str(SAMPLES / "zero2.json"), "--params", "100000000", "--world-size", "8"])
    assert s16["writes"] is True and label == "save_16bit_model: rank 0 writes the module state dict"
