"""Generic fixture-driven runner for the lint rules (tests/rules/fixtures/<CODE>.json).

Each fixture file: {"code": "B001", "cases": [{"name", "config" (or "text": the file's own text), "world_size"?, "hf"?,
"params"?, "inventory"?, "release"?, "via"?, "sidecar_for"?, ..., "expect": [{"pointer", "severity"?, "mentions"?}]}]}.
``expect: []`` is a pass case: the rule reports nothing. Every registered rule has a file, with
a pass and a fail case. ``via`` names the code's producer (lint by default; estimate, check with
stand-in probes, checkpoint, accelerate: see :func:`_produce` for each one's inputs); only
findings of the file's code count, so other rules (and schema findings, which ``select`` does
not filter) cannot make a case pass. ``release`` (a DeepSpeed version) is lint's target release. ``sidecar_for`` (a config) and
``sidecar`` (workload fields) write a workload sidecar next to the config, as generate writes it for
``sidecar_for``; lint is given the workload resolved from it.
Expected numbers in "mentions" are worked out by hand in each case's "why".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.model.inventory import Inventory, TensorSpec, from_param_count
from advisor.views.lint import lint_config
from advisor.config.loading import parse_text
from advisor.config.versions import target_release
from advisor.rules import all_rules
from advisor.ledger.state import Cluster

FIX = Path(__file__).resolve().parent / "fixtures"
FILES = sorted(FIX.glob("*.json"))
#: Rule families with fixtures here (S: schema, tested in test_schema.py; others own their checks).
MINE = set("BPODAZMLV")


def _cases():
    for f in FILES:
        d = json.loads(f.read_text())
        for c in d["cases"]:
            yield pytest.param(d["code"], c, id=f"{d['code']}-{c['name']}")


def _inventory(c):
    if "model" in c:  # a built-in preset (its meta: positions, architecture)
        from advisor.model.specs import resolve_model
        return resolve_model(c["model"])
    if "params" in c:
        return from_param_count(c["params"])
    if "inventory" in c:
        # "meta": the architecture (activations estimated); without it the need leaves them out (M104)
        return Inventory(name="fixture", tensors=[TensorSpec(t["name"], tuple(t["shape"]), t.get("trainable", True),
                                                             t.get("group", 0)) for t in c["inventory"]],
                         meta=c.get("meta") or {})
    return None


def _hardware(c):
    if "hardware" not in c:
        return None
    from advisor.cluster.hardware import from_dict
    return from_dict(c["hardware"], "fixture-hardware.json")


def _subst(obj, tmp: str):
    """``{tmp}`` in any string of ``obj`` -> the test's temporary folder."""
    if isinstance(obj, str):
        return obj.replace("{tmp}", tmp)
    if isinstance(obj, list):
        return [_subst(v, tmp) for v in obj]
    if isinstance(obj, dict):
        return {_subst(k, tmp): _subst(v, tmp) for k, v in obj.items()}
    return obj


def _fake_smi(tmp_path: Path, gpus: list) -> str:
    """A bin/ folder whose nvidia-smi answers check's query for ``gpus`` ([name, total MiB, used MiB])."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    lines = "\n".join(f"{i}, {n}, {t}, {u}" for i, (n, t, u) in enumerate(gpus))
    smi = bin_ / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   'if [ "$1" = "--query-gpu=index,name,memory.total,memory.used" ] && '
                   '[ "$2" = "--format=csv,noheader,nounits" ]; then\n'
                   f"cat <<'EOF'\n{lines}\nEOF\nexit 0\nfi\nexit 6\n")
    smi.chmod(0o755)
    return str(bin_)


def _produce(code: str, case: dict, tmp_path: Path) -> list:
    """Run the producer of ``code`` on the case, as the fixture's ``via`` names it:

    - ``lint`` (default): :func:`advisor.views.lint.lint_config` with only this rule selected;
      ``hardware`` (an advisor.cluster.hardware spec dict) and ``step_time_s`` feed the T rules,
      ``release`` (a DeepSpeed version) the V rules, ``cluster`` (Cluster fields: parallel sizes,
      GPUs per node) the G rules; ``files`` ({relative path: text}) are written under the test's
      temporary folder first (``hf`` may be a dict of Trainer arguments, e.g. resume_from_checkpoint);
    - ``estimate``: :func:`advisor.views.estimate.estimate` with ``capacity`` (bytes per tier),
      ``zero_init`` (the load assumption's --zero-init / --no-zero-init, else estimate's default),
      ``seq_len`` and ``checkpointing`` (the workload); ``model`` names a built-in preset instead
      of ``params`` / ``inventory``;
    - ``check``: :func:`advisor.views.check.run_check` against stand-in probes: ``gpus`` for a
      fake nvidia-smi on PATH, ``env`` (launcher variables; DS_ADVISOR_TEST_LIBAIO), ``meminfo_kb``
      for a /proc/meminfo, ``mkdirs`` and ``disk_free`` for nvme_paths (``{tmp}`` = a temporary folder);
    - ``checkpoint``: :func:`advisor.views.checkpoint.checkpoint_view` with ``hardware`` and ``save_dir``;
    - ``accelerate``: :func:`advisor.config.hf.read_accelerate_config` then ``resolve_accelerate``
      on the case's ``accelerate`` file (a dict written as JSON);
    - ``lint_path``: :func:`advisor.views.lint.lint_path` on the config written to a file, as a
      folder lint runs each file; ``raise_in`` names a rule whose check is made to raise (X001).
    """
    tmp = str(tmp_path)
    case = _subst(case, tmp)
    via = case.get("via", "lint")
    ws = case.get("world_size")
    if via == "accelerate":
        from advisor.config.hf import read_accelerate_config, resolve_accelerate
        f = tmp_path / "accelerate.json"
        f.write_text(json.dumps(case["accelerate"]))
        launch = read_accelerate_config(str(f))
        out = list(launch.findings)
        out += [x for x in resolve_accelerate(launch, world_size=ws).findings if x not in out]
        return out
    if via == "lint_path":
        from contextlib import nullcontext
        from unittest import mock
        from advisor.views.lint import lint_path
        f = tmp_path / "fixture.json"
        f.write_text(json.dumps(case["config"]))
        boom = mock.patch.object(all_rules()[case["raise_in"]], "check", side_effect=RuntimeError("boom")) \
            if "raise_in" in case else nullcontext()
        with boom:
            source, findings, error = lint_path(str(f), select={code, case.get("raise_in", code)})
        assert error is None, error
        return findings
    for rel, text in case.get("files", {}).items():  # a folder on disk the rule reads (H009's checkpoint)
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    # "text": the config's own text (HJSON a dict cannot carry: H011), else the "config" dict as JSON
    loaded = parse_text(case["text"] if "text" in case else json.dumps(case["config"]), "fixture.json")
    inv = _inventory(case)
    if via == "lint":
        cluster = Cluster(**case["cluster"]) if "cluster" in case else None  # the launch shape: the G rules
        ws = ws or (cluster.world_size if cluster else None)
        release = target_release(case["release"]) if "release" in case else None
        workload = None
        if "sidecar_for" in case:  # a workload sidecar generate wrote for the config "sidecar_for" (W002)
            from advisor.views import workload as wl
            cfg = tmp_path / "fixture.json"
            cfg.write_text(json.dumps(case["config"]))
            wl.write_sidecar(str(cfg), {**case.get("sidecar", {}), **wl.config_record(case["sidecar_for"])})
            workload = wl.resolve(str(cfg), {k: None for k in wl.FIELDS} | {"megatron_sp": False},
                                  config_data=case["config"])
        return lint_config(loaded, world_size=ws, world_size_source="--world-size" if ws else None,
                           inventory=inv, hf=case.get("hf", False), select={code},
                           hardware=_hardware(case), step_time_s=case.get("step_time_s"),
                           cluster=cluster, release=release, workload=workload)
    if via == "estimate":
        from advisor.cluster.hardware import Capacity
        from advisor.views.estimate import estimate
        cap = case.get("capacity", {})
        from advisor.ledger.timeline import resolve_load
        from advisor.planning import build_plan
        from advisor.plan import Workload
        plan = build_plan(loaded, inv, Cluster(world_size=ws or 1),
                          workload=Workload(seq_len=case.get("seq_len"), checkpointing=case.get("checkpointing", "none")))
        load = resolve_load(plan.config, case["zero_init"]) if "zero_init" in case else None
        return estimate(plan, Capacity(accelerator=cap.get("accelerator"), host=cap.get("host"), nvme=None),
                        load=load).findings
    if via == "checkpoint":
        from advisor.planning import build_plan
        from advisor.views.checkpoint import checkpoint_view
        return checkpoint_view(build_plan(loaded, inv, Cluster(world_size=ws or 1)),
                               hardware=_hardware(case), save_dir=case.get("save_dir")).findings
    if via == "check":
        from advisor.views.check import run_check
        for d in case.get("mkdirs", []):
            Path(d).mkdir(parents=True, exist_ok=True)
        meminfo = tmp_path / "meminfo"
        meminfo.write_text(f"MemTotal: {case.get('meminfo_kb', 1 << 30)} kB\n"
                           f"MemAvailable: {case.get('meminfo_kb', 1 << 30)} kB\n")
        env = {"PATH": _fake_smi(tmp_path, case.get("gpus", [])) + ":/usr/bin:/bin", **case.get("env", {})}
        return run_check(loaded, inv, env=env, world_size=ws, disk_free=case.get("disk_free"),
                         meminfo_path=str(meminfo)).findings
    raise AssertionError(f"unknown via {via!r}")


@pytest.mark.parametrize("code,case", list(_cases()))
def test_rule_fixture(code, case, tmp_path):
    got = [f for f in _produce(code, case, tmp_path) if f.code == code]  # only the file's rule
    if not case["expect"]:
        assert got == [], [f.to_dict() for f in got]
    for e in _subst(case["expect"], str(tmp_path)):
        hits = [f for f in got if f.pointer == e["pointer"]]
        assert hits, f"no {code} finding at {e['pointer']}; got {[f.to_dict() for f in got]}"
        f = hits[0]
        if "severity" in e:
            assert f.severity == e["severity"], f.to_dict()
        for m in e.get("mentions", []):
            assert m in f.message or m in f.fix, (m, f.to_dict())
        assert f.message and "\n" not in f.message, f.to_dict()
        if not e.get("no_fix"):
            assert f.fix, f.to_dict()
    assert len(got) == len(case["expect"]) or case.get("at_least"), [f.to_dict() for f in got]


def test_every_registered_rule_has_a_fixture_file():
    """Every code ``advisor.rules.all_rules()`` registers has tests/rules/fixtures/CODE.json,
    with a case that finds it and a case that does not (test_fixtures_have_pass_and_fail_cases)."""
    codes = {json.loads(f.read_text())["code"] for f in FILES}
    missing = sorted(set(all_rules()) - codes)
    assert not missing, f"registered rules without a fixture: {missing}"
    assert not codes - set(all_rules()), f"fixtures for unregistered codes: {sorted(codes - set(all_rules()))}"


def test_every_rule_has_an_explanation():
    """`explain CODE` text for every code: it names the code and says how to fix it; a config
    rule also shows the anti-pattern (the K rules judge the node, X001 reports ds-advisor's own
    failure, neither is about the config)."""
    for code, cls in all_rules().items():
        text = cls.explanation()
        assert text.startswith(code), code
        assert "Fix" in text or "fix" in text, code
        if cls.produced_by != "check" and code[0] != "X":  # X: ds-advisor's own failure
            assert "Anti-pattern" in text, code
        assert cls.severity in ("error", "warning", "info") and cls.name


def test_fixtures_have_pass_and_fail_cases():
    for f in FILES:
        d = json.loads(f.read_text())
        assert any(c["expect"] for c in d["cases"]), f.name
        assert any(not c["expect"] for c in d["cases"]), f.name
