"""Loading configs as DeepSpeed 0.19.8 does (hjson, duplicate keys refused, base64), and bad
input: one clear line naming the file and the problem, exit 2, never a traceback."""

from __future__ import annotations

import base64
import json

import pytest

from advisor.errors import ConfigLoadError
from advisor.config.loading import MAX_CONFIG_BYTES, load_config, parse_text
from tests.conftest import CORPUS, run_cli


def test_hjson_features_are_accepted_like_deepspeed():
    # comments, unquoted keys, trailing commas: hjson (DeepSpeed's loader) takes them
    c = parse_text('{\n  # a comment\n  train_batch_size: 8,\n  "fp16": {"enabled": true,},\n}', "x")
    assert c.data == {"train_batch_size": 8, "fp16": {"enabled": True}}
    # an unquoted Python True is a *string* to hjson (a quoteless string runs to the end of
    # the line, comma included), exactly as DeepSpeed receives it
    assert parse_text('{\n"a": True\n"b": False,\n}', "x").data == {"a": "True", "b": "False,"}


def test_positions_are_line_and_column_of_the_key():
    text = '{\n  "zero_optimization": {\n    "stage": 3,\n    "offload_param": {"device": "nvme"}\n  }\n}'
    c = parse_text(text, "f.json")
    assert c.positions["/zero_optimization"] == (2, 4)
    assert c.positions["/zero_optimization/stage"] == (3, 6)
    assert c.positions["/zero_optimization/offload_param/device"] == (4, 24)


def test_duplicate_key_is_refused_with_its_line():
    with pytest.raises(ConfigLoadError) as e:
        parse_text('{"a": 1,\n "b": {"c": 1, "c": 2}}', "dup.json")
    assert "duplicate key 'c'" in str(e.value)
    assert str(e.value).startswith("dup.json:2:")


def test_base64_config_is_accepted_like_deepspeed():
    raw = base64.urlsafe_b64encode(json.dumps({"train_batch_size": 4}).encode()).decode()
    assert load_config(raw).data == {"train_batch_size": 4}


@pytest.mark.parametrize("content,needle", [
    (b"", "empty file"),
    (b"   \n\t\n", "empty file"),
    (b"\x00\x01\x02\xff\xfe", "binary"),
    (b"\xff\xfe{\"a\": 1}", "not UTF-8"),
    (b'{"a": 1', "not valid JSON/HJSON"),
    (b'[1, 2, 3]', "top level is an array"),
    (b'"just a string"', "top level is a str"),
    (b"[" * 5000 + b"]" * 5000, "nesting deeper"),
])
def test_bad_files_give_one_line_exit_2(tmp_path, content, needle):
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    p = run_cli(["lint", str(f)])
    assert p.returncode == 2, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert needle in out and str(f) in out
    assert "Traceback" not in out


def test_missing_file_and_directory(tmp_path):
    p = run_cli(["lint", str(tmp_path / "nope.json")])
    assert p.returncode == 2 and "no such file" in p.stdout + p.stderr
    empty_dir = tmp_path / "d"
    empty_dir.mkdir()
    p = run_cli(["lint", str(empty_dir)])
    assert p.returncode == 2 and "no config files" in p.stderr
    assert "Traceback" not in p.stdout + p.stderr


def test_oversized_file_refused(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b'{"a": "' + b"x" * (MAX_CONFIG_BYTES + 10) + b'"}')
    with pytest.raises(ConfigLoadError, match="limit"):
        load_config(str(f))


def test_wrong_types_and_huge_numbers_are_findings_not_crashes(tmp_path):
    f = tmp_path / "types.json"
    f.write_text(json.dumps({
        "train_batch_size": "sixteen", "train_micro_batch_size_per_gpu": 10**400 if False else 1e300,
        "zero_optimization": {"stage": "three", "reduce_bucket_size": 10**30, "offload_param": [1, 2]},
        "fp16": True, "bf16": {"enabled": {"x": 1}},
    }))
    for cmd in (["lint", str(f)], ["estimate", str(f), "--params", "1000"]):
        p = run_cli(cmd)
        assert p.returncode in (0, 1), p.stdout + p.stderr
        assert "Traceback" not in p.stdout + p.stderr


def test_stdin_is_read(tmp_path):
    p = run_cli(["lint", "-", "--format", "json"], stdin='{"train_batch_size": 8}')
    assert p.returncode in (0, 1)
    assert json.loads(p.stdout)["files"][0]["file"] == "<stdin>"


def test_every_corpus_config_loads_or_fails_cleanly():
    files = [f for f in sorted(CORPUS.iterdir()) if f.suffix not in (".tsv", ".md")]
    assert len(files) >= 60
    for f in files:
        try:
            load_config(str(f))
        except ConfigLoadError as e:  # allowed: DeepSpeed would refuse it too
            assert str(f) in str(e)
