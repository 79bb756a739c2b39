"""Keys DeepSpeed 0.19.8 checks with ``value in [True, False]`` (defaults.TRUE_FALSE_KEYS): the lint follows
DeepSpeed itself, called here, not the advisor's own reading. Before this test (nits17) pipeline_stage 1 / 0 / 1.0
was an S003 error ("DeepSpeed uses the value as is ...") and "yes" said "any non-empty string counts as true",
while DeepSpeed accepts the first and raises DeepSpeedConfigError on the second."""
from __future__ import annotations

import pathlib
import re

import pytest

from advisor.config.defaults import TRUE_FALSE_KEYS
from advisor.config.loading import LoadedConfig, load_config
from advisor.config.schema import validate_config


def _findings(value):
    data = {"train_micro_batch_size_per_gpu": 1, "checkpoint": {"parallel_write": {"pipeline_stage": value}}}
    return [f for f in validate_config(LoadedConfig(source="<test>", data=data))
            if f.pointer == "/checkpoint/parallel_write/pipeline_stage"]


def _deepspeed_reads(value):
    """What DeepSpeed 0.19.8's own parser does with the value: (accepted, truth) or raises."""
    from deepspeed.runtime.config import get_checkpoint_parallel_write_pipeline
    return get_checkpoint_parallel_write_pipeline({"parallel_write": {"pipeline_stage": value}})


@pytest.mark.parametrize("value", [1, 0, 1.0, 0.0])
def test_numbers_deepspeed_accepts_are_a_warning_not_a_refusal(value):
    truth = bool(_deepspeed_reads(value))  # DeepSpeed accepts it (raises otherwise)
    fs = _findings(value)
    assert fs and all(f.severity == "warning" for f in fs), fs
    assert f"reads it as {'true' if truth else 'false'}" in fs[0].message


@pytest.mark.parametrize("value", ["yes", "true", None, 2, "1"])
def test_values_deepspeed_refuses_say_so(value):
    from deepspeed.runtime.config import DeepSpeedConfigError
    with pytest.raises(DeepSpeedConfigError) as exc:
        _deepspeed_reads(value)
    fs = _findings(value)
    assert fs and fs[0].severity == "error", fs
    assert "refuses it while parsing the config" in fs[0].message
    assert "non-empty string counts as true" not in fs[0].message
    # the message quotes DeepSpeed's own error text
    assert str(exc.value).split("value of ", 1)[1] in fs[0].message


def test_one_point_zero_spreads_layer_files_like_true(tmp_path):
    from advisor.config.effective import effective_config
    p = tmp_path / "c.json"
    p.write_text('{"checkpoint": {"parallel_write": {"pipeline_stage": 1.0}}}')
    assert effective_config(load_config(str(p)).data).checkpoint_parallel_write_pipeline is bool(_deepspeed_reads(1.0))


def test_every_true_false_check_in_deepspeed_is_listed():
    """Scan the installed DeepSpeed for the ``in [True, False]`` test outside loops: each function found is a key
    of TRUE_FALSE_KEYS's sources, and the other way round."""
    import deepspeed
    root = pathlib.Path(deepspeed.__file__).parent
    found = set()
    for f in root.rglob("*.py"):
        func = None
        for line in f.read_text(errors="replace").splitlines():
            m = re.match(r"\s*def (\w+)", line)
            if m:
                func = m.group(1)
            if re.search(r"in [\[(]True, False[\])]", line) and not re.match(r"\s*for ", line):
                found.add(f"{f.relative_to(root).as_posix()}:{func}")
    listed = {src.split(" ")[0] for src in TRUE_FALSE_KEYS.values()}
    assert found == listed


def test_a_written_float_is_echoed_as_written(tmp_path):
    """DeepSpeed's hjson reader makes 1.0 the int 1 (checked here with hjson itself); the finding quotes the
    file's 1.0, not 1 (nits17)."""
    import hjson
    assert type(hjson.loads('{"a": 1.0}')["a"]) is int
    p = tmp_path / "c.json"
    p.write_text('{"train_micro_batch_size_per_gpu": 1,\n "checkpoint": {"parallel_write": {"pipeline_stage": 1.0}}}')
    fs = [f for f in validate_config(load_config(str(p))) if f.pointer == "/checkpoint/parallel_write/pipeline_stage"]
    assert fs and fs[0].severity == "warning" and "pipeline_stage is 1.0 " in fs[0].message, fs
