"""accelerate's DeepSpeedPlugin raises 'When using `deepspeed_config_file`, the following accelerate
config variables will be ignored' (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__;
tests/test_hf.py raises it with the real plugin) for the YAML keys next to deepspeed_config_file: the
H004 finding points at the first of those keys, with its line:column in the YAML (it said "/", no
line), in lint and in check, as every other accelerate finding does."""

from __future__ import annotations

import json

from tests.conftest import run_cli, run_json


def _at(text: str, key: str) -> tuple[int, int]:
    """(line, column), 1-based, of ``key:`` in ``text``, found by hand: the line that starts with it."""
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(key + ":"):
            return i, len(line) - len(line.lstrip()) + 1
    raise AssertionError(key)


DS = '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}'


def _h004(tmp_path, yaml_text: str) -> dict:
    (tmp_path / "acc.yaml").write_text(yaml_text)
    (tmp_path / "ds.json").write_text(DS)
    rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
    acc = next(f for f in out["files"] if f["file"].endswith("acc.yaml"))
    h = [f for f in acc["findings"] if f["code"] == "H004"]
    assert rc == 1 and len(h) == 1, out
    return h[0]


def test_mixed_precision_next_to_config_file_has_its_line(tmp_path):
    text = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
            "  deepspeed_config_file: ds.json\n  zero3_init_flag: false\nmixed_precision: bf16\nnum_processes: 2\n")
    h = _h004(tmp_path, text)
    assert h["pointer"] == "/mixed_precision"
    assert (h["line"], h["column"]) == _at(text, "mixed_precision") == (6, 1)
    p = run_cli(["check", "acc.yaml", "--params", "1000000"], cwd=tmp_path)
    assert "acc.yaml:6:1: error H004 /mixed_precision" in p.stdout, p.stdout


def test_nested_field_and_legacy_fp16_point_at_their_keys(tmp_path):
    text = ("distributed_type: DEEPSPEED\nfp16: true\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
            "  zero_stage: 3\nnum_processes: 2\n")
    h = _h004(tmp_path, text)
    assert h["pointer"] == "/deepspeed_config/zero_stage"  # the first key accelerate names (YAML order)
    assert (h["line"], h["column"]) == _at(text, "zero_stage") == (5, 3)
    assert "zero_stage, mixed_precision" in h["message"]
    assert h["data"]["pointers"] == ["/deepspeed_config/zero_stage", "/fp16"]  # legacy fp16 -> mixed_precision


def test_a_key_the_yaml_lacks_is_at_the_documents_start(tmp_path):
    """H006 about a missing num_processes had no line:column (the README: every finding has one); a JSON
    config's finding about an absent key sits at the document's start, 1:1 (advisor.config.loading), and
    so does the YAML's now (newcomer check, session 21)."""
    (tmp_path / "acc.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                       "deepspeed_config:\n  deepspeed_config_file: ds.json\nnum_machines: 1\n")
    (tmp_path / "ds.json").write_text(DS)
    rc, out = run_json(["lint", "acc.yaml", "--format", "json"], cwd=tmp_path)
    acc = next(f for f in out["files"] if f["file"].endswith("acc.yaml"))
    h = [f for f in acc["findings"] if f["code"] == "H006"]
    assert h and (h[0]["line"], h[0]["column"]) == (1, 1), h
    p = run_cli(["lint", "acc.yaml"], cwd=tmp_path)
    assert "acc.yaml:1:1: info H006 /num_processes" in p.stdout, p.stdout
