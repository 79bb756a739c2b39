"""fixa22 (newcomer 22, finding 5): without --seq-len the activations are for the model's maximum
context, and the M100 that says "over by 2,157.77 GiB" never said so. Llama 3.1 8B's context is
131,072 tokens (max_position_embeddings in meta-llama/Llama-3.1-8B's config.json). The accelerator M100
now names the assumed length and gives --seq-len first; the host's (a checkpoint save, which no
activation reaches) does not; with --seq-len given, nothing is said to be assumed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SAMPLES, run_cli

ARGS = [str(SAMPLES / "zero3.json"), "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--format", "json"]


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_the_accelerator_shortfall_names_the_assumed_seq_len(cmd, tmp_path):
    env = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}
    d = json.loads(run_cli([cmd, *ARGS], cwd=tmp_path, env=env).stdout)
    acc, = [f for f in d["findings"] if f["code"] == "M100" and f["data"]["tier"] == "accelerator"]
    assert acc["data"]["assumed_seq_len"] == 131072
    assert "131,072 tokens" in acc["message"] and "no --seq-len" in acc["message"]
    assert acc["fix"].startswith("give --seq-len")
    if "no single change fits" in acc["fix"]:
        assert "no single change fits when re-estimated at the assumed 131,072 tokens" in acc["fix"]
    for f in d["findings"]:
        if f["code"] == "M100" and f["data"]["tier"] != "accelerator":
            assert "assumed_seq_len" not in f["data"] and "--seq-len" not in f["fix"], f
    # the same length given: the same shortfall, nothing assumed
    d = json.loads(run_cli([cmd, *ARGS, "--seq-len", "131072"], cwd=tmp_path, env=env).stdout)
    acc2, = [f for f in d["findings"] if f["code"] == "M100" and f["data"]["tier"] == "accelerator"]
    assert acc2["data"]["need"] == acc["data"]["need"]
    assert "assumed_seq_len" not in acc2["data"] and "--seq-len" not in acc2["message"] + acc2["fix"]
