"""Issue 21 audit: the workload sidecar's ``trainer`` record (what ``generate --hf`` writes: the HF Trainer
arguments the plan assumed for the config's "auto" keys, advisor/views/workload.py ``TRAINER_AUTO``) took
unknown keys and null values silently. A misspelt ``per_device_batch_size`` was read as absent, so ``check --hf``
judged the Trainer's default per-device batch (8, transformers TrainingArguments) instead of the value the user
wrote, and ``"bf16": null`` read as "not recorded" though it looks like "no bf16". Now each is refused with one
line naming the sidecar, the JSON pointer and the problem (exit 2, as every other bad sidecar value), an unknown
key with a did-you-mean where one is close (difflib, as H010 and the settings reader do)."""

from __future__ import annotations

import json

import pytest

from advisor.errors import ConfigLoadError
from advisor.views.workload import TRAINER_AUTO, read_sidecar
from tests.robustness.robust_helpers import run_cli


def _read(tmp_path, trainer) -> dict:
    p = tmp_path / "c.workload.json"
    p.write_text(json.dumps({"seq_len": 64, "trainer": trainer}))  # a lone surrogate as JSON's \ud800 escape
    return read_sidecar(str(p))


@pytest.mark.parametrize("trainer, words", [
    ({"per_device_batch_size": 2}, ["/trainer: unknown key 'per_device_batch_size'",
                                    "did you mean per_device_train_batch_size?"]),
    ({"gradient_accumulation_step": 4, "bf16": True}, ["'gradient_accumulation_step'",
                                                      "did you mean gradient_accumulation_steps?"]),
    ({"optim": "adamw_torch"}, ["/trainer: unknown key 'optim' (HF Trainer arguments"]),
    # a misspelling is named first even among unrelated keys; the rest are counted, not listed
    ({"a": 1, "b": 2, "c": 3, "d": 4, "fp61": True}, ["unknown keys 'fp61' (did you mean fp16?)", "and 2 more"]),
    ({"\ud800": 1}, ["unknown key '\ud800'"]),
    ({"x" * 5000: 1}, ["(5000 characters)"]),
    ({"bf16": None}, ["/trainer/bf16: null is not a value here (true or false;", "remove the key"]),
    ({"per_device_train_batch_size": None}, ["/trainer/per_device_train_batch_size: null is not a value here "
                                             "(a positive integer;"]),
])
def test_trainer_record_refuses_unknown_keys_and_nulls(tmp_path, trainer, words):
    with pytest.raises(ConfigLoadError) as e:
        _read(tmp_path, trainer)
    msg = str(e.value)
    assert "\n" not in msg and "c.workload.json" in msg and len(msg) < 1000, msg
    for w in words:
        assert w in msg, (w, msg)


def test_every_known_argument_is_still_read(tmp_path):
    rec = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": True, "fp16": False}
    assert set(rec) == set(TRAINER_AUTO)
    assert _read(tmp_path, rec)["trainer"] == rec
    assert _read(tmp_path, {})["trainer"] == {}


@pytest.mark.parametrize("cmd", ["check", "estimate", "lint"])
def test_commands_refuse_the_misspelt_record_in_one_line(tmp_path, cmd):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    (tmp_path / "c.workload.json").write_text('{"trainer": {"per_device_batch_size": 2}}')
    args = [cmd, str(cfg), "--world-size", "1"] + ([] if cmd == "lint" else
                                                   ["--hf", "--params", "1000000", "--gpu-memory", "80GB"])
    p = run_cli(args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    last = p.stderr.strip().splitlines()[-1]
    assert "c.workload.json: /trainer: unknown key 'per_device_batch_size'" in last, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
