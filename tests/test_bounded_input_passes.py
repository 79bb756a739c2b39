"""Issue 21 (bounded work), the input passes of a large config or inventory: what they must not
do, tested by structure, not by time (benchmarks/bounds.py measures the time).

* the non-finite check builds JSON pointers only once it has found a non-finite value;
* plain JSON is read by ``json.loads``, not by hjson's pure-Python decoder, and gives what
  hjson gives (values with hjson's number reading, positions, and for anything else hjson's
  own errors); hjson itself is the reference here;
* ``depth_ok`` is the running bracket depth, checked against the character-by-character walk
  it replaced;
* ``reduce_arrays`` groups later elements exactly as ``json.dumps(sort_keys=True)`` text does.
"""

from __future__ import annotations

import json
import random

import pytest

from advisor.config import loading, readers
from advisor.config.loading import parse_text
from advisor.errors import ConfigLoadError


def _refuse(*a, **k):
    raise AssertionError("must not be called here")


def test_non_finite_pointers_built_only_after_a_hit(monkeypatch) -> None:
    big = {"x": [{} for _ in range(1000)] + [{"a": 1.5, "b": [2.0, "s", None, True]}]}
    monkeypatch.setattr(readers, "_non_finite_pointer", _refuse)
    assert readers.non_finite_path(big) is None
    # the whole load of a finite config never reaches the pointer pass either
    parse_text(json.dumps(big), "c.json")
    monkeypatch.undo()
    big["x"][500] = {"k": [1.0, float("inf")]}
    assert readers.non_finite_path(big) == "/x/500/k/1"
    assert readers.non_finite_path([1, [2, float("nan")]]) == "/1/1"
    assert readers.non_finite_path(float("-inf")) == "/"


def test_plain_json_is_not_read_by_hjson(monkeypatch) -> None:
    monkeypatch.setattr(loading, "_parse_hjson", _refuse)
    c = parse_text('{\n  "train_batch_size": 8,\n  "x": [{}, {"a": 1.0}]\n}', "c.json")
    assert c.data == {"train_batch_size": 8, "x": [{}, {"a": 1}]}
    assert type(c.data["x"][1]["a"]) is int  # hjson reads 1.0 as the int 1 (decoder.py scantfnns)
    assert c.positions["/x/1/a"] == (3, 15)  # the key's own text: `  "x": [{}, {"a"` puts a at column 15


@pytest.mark.parametrize("text", [
    '{"a": 1, "a": 2}',          # duplicate key: hjson's error with the key's line:column
    '{"a": NaN}', '{"a": 1e400}',  # non-finite: the advisor's own error
    '[1, 2]',                     # not an object
    '{"a": 1,}', '{a: 1}', '{"a": 1} // c', '{"a": "\t"}',  # HJSON only
])
def test_text_json_loads_would_take_differently_goes_to_hjson(text: str) -> None:
    assert loading._parse_plain_json(text) is None
    try:
        want = loading._parse_hjson(text, "c.json")
    except ConfigLoadError as e:
        with pytest.raises(ConfigLoadError) as got:
            parse_text(text, "c.json")
        assert str(got.value) == str(e)
    else:
        got = parse_text(text, "c.json")
        assert (got.data, got.positions) == want


def _value(rng: random.Random, depth: int):
    r = rng.random()
    if depth > 3 or r < 0.4:
        return rng.choice([0, 1, -1, 10 ** 12, 1.0, -0.0, 1.5, 1e9, 1e10, 9999999999.0, 1e-7, 2.5e300, True, False,
                           None, "s", 'a"b', "é\\n", "\u2028", "x:y", "", "k"])
    if r < 0.7:
        return {rng.choice(["a", "b", "train", "é", 'a"q', "~/", "", "x y"]) + str(rng.randint(0, 3)):
                _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


@pytest.mark.parametrize("seed", range(4))
def test_plain_json_reads_as_hjson_reads_it(seed: int) -> None:
    """Values (types included: hjson turns integral floats under 1e10 into ints) and every key's
    line:column, against hjson's decoder on the same text."""
    rng = random.Random(seed)
    for _ in range(300):
        doc = {f"k{i}": _value(rng, 0) for i in range(rng.randint(1, 5))}
        text = json.dumps(doc, indent=rng.choice([None, 0, 1, 2, "\t"]), ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.3:
            text = text.replace("1.0", "1.0e0").replace("1.5", "15E-1")
        fast = loading._parse_plain_json(text)
        assert fast is not None, text
        want = loading._parse_hjson(text, "c.json")
        assert repr(fast[0]) == repr(want[0]), text
        assert fast[1] == want[1], text


def _depth_ok_by_walk(text: str, max_depth: int) -> bool:
    depth = 0
    for ch in text:
        if ch in "{[":
            depth += 1
            if depth > max_depth:
                return False
        elif ch in "}]":
            depth -= 1
    return True


def test_depth_ok_is_the_running_bracket_depth() -> None:
    rng = random.Random(3)
    texts = ["", "{}", "]]]][[[[", "[" * 65, "[" * 64, "]" + "[" * 64, "{[" * 40 + "]}" * 40]
    texts += ["".join(rng.choice("{}[]a") for _ in range(rng.randint(0, 300))) for _ in range(300)]
    # balanced nests around the limit (the fast path deletes innermost pairs; 1 or 2 levels a pass)
    for d in (1, 2, 3, 31, 32, 33, 63, 64, 65, 66, 128):
        for _ in range(4):
            opens = "".join(rng.choice("{[") for _ in range(d))
            closes = "".join({"{": "}", "[": "]"}[c] for c in reversed(opens))
            texts += [opens + closes, "a" + opens + '"x"' + closes + "[]" * 3, (opens + closes) * 2]
    for t in texts:
        for m in (0, 3, 64):
            assert readers.depth_ok(t, m) == _depth_ok_by_walk(t, m), (t, m)


def test_reduce_arrays_groups_by_canonical_json_text() -> None:
    from advisor.config.schema import ARRAY_HEAD, reduce_arrays
    rng = random.Random(5)
    later = [rng.choice([{}, [], {"a": 1}, {"a": 1.0}, {"b": 1, "a": 2}, {"a": 2, "b": 1}, [1], [True], 1, "1",
                         True, None, 0.0]) for _ in range(200)]
    data = {"x": list(range(ARRAY_HEAD)) + later}
    _, amap = reduce_arrays(data)
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(later):
        key = (type(v).__name__, v) if not isinstance(v, (dict, list)) else json.dumps(v, sort_keys=True)
        groups.setdefault(repr(key), []).append(ARRAY_HEAD + i)
    assert amap[("x",)][ARRAY_HEAD:] == list(groups.values())



# ---- inventories: the bulk build equals the dataclass, errors name the first bad tensor ----

def test_bulk_inventory_equals_tensor_by_tensor_construction() -> None:
    from advisor.model.inventory import TensorSpec, from_dict
    rows = [{"name": "a.w", "shape": [3, 5]}, {"name": "a.b", "shape": [5], "trainable": False, "group": 1},
            {"shape": [7, 1, 2], "dtype": "bf16"}, {"name": "s", "shape": []}, {"name": 12, "shape": [2]},
            {"name": None, "shape": [4]}]
    inv = from_dict({"tensors": rows}, "inv.json")
    want = [TensorSpec("a.w", (3, 5)), TensorSpec("a.b", (5,), False, 1), TensorSpec("t2", (7, 1, 2), dtype="bf16"),
            TensorSpec("s", ()), TensorSpec("12", (2,)), TensorSpec("None", (4,))]
    assert list(inv.tensors) == want
    assert [t.numel for t in inv.tensors] == [15, 5, 14, 1, 2, 4]
    assert [repr(t) for t in inv.tensors] == [repr(t) for t in want] and hash(inv.tensors[0]) == hash(want[0])


@pytest.mark.parametrize("bad, where", [
    ({"name": "x", "shape": [0]}, "/tensors/3/shape"),
    ({"name": "x", "shape": [True]}, "/tensors/3/shape"),
    ({"name": "x", "shape": [1 << 30, 1 << 30]}, "/tensors/3/shape"),  # product over 2^48
    ({"name": "x", "shape": [1] * 9}, "/tensors/3/shape"),
    ({"name": "x", "shape": [2], "trainable": 1}, "/tensors/3/trainable"),
    ({"name": "x", "shape": [2], "group": -1}, "/tensors/3/group"),
    ({"name": "x", "shape": [2], "group": True}, "/tensors/3/group"),
    ([2], "/tensors/3: expected an object (one tensor, e.g. {\"name\": \"w\", \"shape\": [64, 64]}), got an array"),
])
def test_bad_tensor_named_at_its_index(bad, where: str) -> None:
    from advisor.errors import ModelSpecError
    from advisor.model.inventory import from_dict
    rows = [{"name": f"t{i}", "shape": [4, 4]} for i in range(6)]
    rows[3] = bad
    rows[5] = {"name": "later", "shape": [-1]}  # a later bad entry is not the one named
    with pytest.raises(ModelSpecError) as e:
        from_dict({"tensors": rows}, "inv.json")
    assert f"inv.json: {where}" in str(e.value)


# ---- flags and sidecar values bounded like the flags (issue 21) ----------------------------

from tests.conftest import run_cli  # noqa: E402

SAMPLE = "sample_configs/zero3.json"


@pytest.mark.parametrize("args, flag", [
    (["checkpoint", SAMPLE, "--model", "gpt2", "--keep", str((1 << 20) + 1)], "--keep"),
    (["lint", "sample_configs/hf_trainer_zero3_auto.json", "--hf", "--hidden-size", str((1 << 24) + 1)],
     "--hidden-size"),
    (["lint", "sample_configs/hf_trainer_zero3_auto.json", "--hf", "--hidden-size", "1" + "0" * 400],
     "--hidden-size"),  # was an internal error (OverflowError in 0.9 x h^2)
])
def test_unbounded_flags_are_refused_with_their_name(args: list[str], flag: str) -> None:
    p = run_cli(args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"'{flag}'" in p.stderr and "range" in p.stderr and "internal error" not in p.stderr + p.stdout


def test_flag_limits_are_the_validation_constants() -> None:
    from advisor.config import validation
    assert validation.MAX_KEEP == 1 << 20 and validation.MAX_DIM == 1 << 24


def _sidecar(tmp_path, **fields) -> str:
    p = tmp_path / "ds.workload.json"
    p.write_text(json.dumps(fields))
    return str(p)


@pytest.mark.parametrize("key, over, flag", [
    ("seq_len", (1 << 40) + 1, "--seq-len"),
    ("micro_batch", 10 ** 28, "--micro-batch"),
    ("tensor_parallel", (1 << 20) + 1, "--tensor-parallel"),
    ("pipeline_parallel", (1 << 20) + 1, "--pipeline-parallel"),
    ("sequence_parallel", (1 << 20) + 1, "--sequence-parallel"),
    ("expert_parallel", (1 << 20) + 1, "--expert-parallel"),
    ("moe_capacity_factor", 1e300, "--moe-capacity-factor"),
])
def test_sidecar_values_have_the_flags_bounds(tmp_path, key: str, over, flag: str) -> None:
    from advisor.views.workload import LIMITS, read_sidecar
    hi = LIMITS[key][0]
    assert read_sidecar(_sidecar(tmp_path, **{key: hi}))[key] == hi  # the bound itself is taken
    with pytest.raises(ConfigLoadError) as e:
        read_sidecar(_sidecar(tmp_path, **{key: over}))
    msg = str(e.value)
    assert "\n" not in msg and "ds.workload.json" in msg and f"/{key}" in msg and flag in msg


def test_sidecar_bounds_match_the_flags_options() -> None:
    """The sidecar's limit for each field is the one its flag's click type has."""
    from advisor.cli import OPTIONS
    from advisor.views.workload import LIMITS
    for key, (hi, flag) in LIMITS.items():
        decls, kw = OPTIONS[key]
        assert flag in decls and kw["type"].max == hi, key


def test_sidecar_layer_count_of_5000_digits_is_one_line(tmp_path) -> None:
    from advisor.views.workload import read_sidecar
    with pytest.raises(ConfigLoadError) as e:
        read_sidecar(_sidecar(tmp_path, checkpointing="9" * 5000))
    assert "/checkpointing" in str(e.value) and len(str(e.value)) < 400
    assert read_sidecar(_sidecar(tmp_path, checkpointing="12"))["checkpointing"] == "12"


def test_sidecar_over_the_bound_is_exit_2_naming_it(tmp_path) -> None:
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    _sidecar(tmp_path, seq_len=(1 << 40) + 1)
    p = run_cli(["estimate", str(cfg), "--model", "gpt2"])
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "ds.workload.json" in p.stderr and "/seq_len" in p.stderr


# ---- rule look-ups once per suppression entry: no copy of the registry per call -----------

def test_find_rule_and_emit_do_not_copy_the_registry(monkeypatch) -> None:
    import advisor.rules as rules
    every = rules.all_rules()  # loads every rule module
    monkeypatch.setattr(rules, "all_rules", _refuse)
    for code, r in every.items():
        # by code in any case, and by name as the old scan found it (the first in code order)
        assert rules.find_rule(code.lower()) is r
        first = next(x for x in every.values() if x.name.lower() == r.name.lower())
        assert rules.find_rule(f" {r.name.upper()} ") is first
    assert rules.find_rule("ZZ1") is None and rules.find_rule("no-such-rule") is None
    assert rules.emit("S002", "warning", "/x", "m").code == "S002"


def test_sidecar_goes_through_the_guarded_reader(tmp_path) -> None:
    """Over 1 MiB: refused whole (it was cut at 1 MiB and failed as broken JSON); a bad number
    or syntax: one line with its line:column."""
    from advisor.views.workload import MAX_SIDECAR_BYTES, read_sidecar
    big = _sidecar(tmp_path, seq_len=128, pad="x" * MAX_SIDECAR_BYTES)
    with pytest.raises(ConfigLoadError, match=f"over the {MAX_SIDECAR_BYTES}-byte limit"):
        read_sidecar(big)
    p = tmp_path / "ds.workload.json"
    p.write_text('{"seq_len": 128,\n "moe_capacity_factor": NaN}')
    with pytest.raises(ConfigLoadError, match=r"ds.workload.json:2:\d+: non-finite number NaN"):
        read_sidecar(str(p))
