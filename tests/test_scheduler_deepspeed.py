"""The scheduler rules (L001/L002) against DeepSpeed 0.19.8 itself.

Each L001/L002 fixture config goes through the real ``DeepSpeedEngine._scheduler_from_config``
(the code ``deepspeed.initialize`` runs) with a torch AdamW optimizer; the file is read the way
the launch reads it (hjson for a plain DeepSpeed launch, ``json.load`` under the HF Trainer).
L001 must report an error exactly when DeepSpeed raises. The constructor table in
``advisor.config.scheduler`` is compared with the installed classes' signatures.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from advisor.config.loading import parse_text
from advisor.config.scheduler import OPTIMIZER_LR, REQUIRED, SCHEDULERS
from advisor.views.lint import lint_config

FIX = Path(__file__).resolve().parent / "rules" / "fixtures"


def _cases():
    for code in ("L001", "L002"):
        for c in json.loads((FIX / f"{code}.json").read_text())["cases"]:
            if not any(v == "auto" for v in (c["config"]["scheduler"].get("params") or {}).values()):
                yield pytest.param(c, id=f"{code}-{c['name']}")  # "auto": the Trainer fills it (test_hf.py)


def test_signatures_match_installed_deepspeed():
    lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")
    for name, sig in SCHEDULERS.items():
        params = list(inspect.signature(getattr(lr_schedules, name).__init__).parameters.values())[2:]
        got = {p.name: (REQUIRED if p.default is inspect.Parameter.empty else p.default) for p in params}
        want = {k: (None if v is OPTIMIZER_LR else v) for k, v in sig.items()}
        assert got == want, name


@pytest.mark.parametrize("case", list(_cases()))
def test_l001_iff_deepspeed_raises(case):
    pytest.importorskip("deepspeed")
    import hjson
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    text = json.dumps(case["config"])
    raw = json.loads(text) if case.get("hf") else hjson.loads(text)
    opt = raw.get("optimizer", {}).get("params", {})
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt.get("lr", 1e-3))
    sched = raw["scheduler"]

    class Cfg:  # what _scheduler_from_config reads from the engine
        def scheduler_name(self):
            return sched.get("type")

        def scheduler_params(self):
            return sched.get("params")  # config.py get_scheduler_params: None without "params"

    try:
        DeepSpeedEngine._scheduler_from_config(Cfg(), optimizer)
        raised = None
    except (ValueError, TypeError, AssertionError) as e:
        raised = e
    got = lint_config(parse_text(text, "fixture.json"), hf=bool(case.get("hf")), select={"L001"})
    errors = [f for f in got if f.code == "L001"]
    assert bool(errors) == (raised is not None), (raised, [f.to_dict() for f in errors])


def test_warmup_decay_default_peak_is_0_001_whatever_the_optimizer_lr():
    """L002's claim, on the real class: optimizer lr 2e-5, no warmup_max_lr -> the peak is 1e-3."""
    pytest.importorskip("deepspeed")
    import torch
    from deepspeed.runtime.lr_schedules import WarmupDecayLR, WarmupLR

    opt = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=2e-5)
    s = WarmupDecayLR(opt, total_num_steps=100, warmup_num_steps=10)
    for _ in range(11):
        s.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * (100 - 10) / 90)
    opt2 = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=2e-5)
    s2 = WarmupLR(opt2, warmup_num_steps=10)  # WarmupLR: the optimizer's own lr is the peak
    for _ in range(11):
        s2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(2e-5)


def _sched_findings(sched: dict, hf: bool = False, optimizer: bool = False) -> dict[str, list]:
    raw = {"train_micro_batch_size_per_gpu": 1, "scheduler": sched}
    if optimizer:
        raw["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-3}}
    got = lint_config(parse_text(json.dumps(raw), "ds.json"), hf=hf, select={"L001", "L002"})
    return {c: [f for f in got if f.code == c] for c in ("L001", "L002")}


def test_warmup_cosine_ratios_outside_0_1_as_deepspeed_runs_them():
    """WarmupCosineLR does not check its ratios (lr_schedules.py get_lr_ratio): cos_min_ratio -0.5
    is clamped by max(0.0, ...) so the lr is 0 well before total_num_steps; warmup_min_ratio 1.5
    starts above the optimizer's lr; a list ratio raises TypeError at the first step. L002 warns on
    the first two (at the key), L001 refuses the list; an in-range ratio is not reported."""
    pytest.importorskip("deepspeed")
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    def lrs(steps=100, **kw):
        opt = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        s = WarmupCosineLR(opt, total_num_steps=steps, warmup_num_steps=10, warmup_type="linear", **kw)
        out = []
        for _ in range(steps):
            s.step()
            out.append(opt.param_groups[0]["lr"])
        return out

    neg = lrs(cos_min_ratio=-0.5)
    assert min(i for i, x in enumerate(neg) if x == 0.0) < 99  # at 0 before the end
    assert lrs(warmup_min_ratio=1.5)[0] > 1.0  # warms down from above the optimizer's lr
    with pytest.raises(TypeError):
        lrs(warmup_min_ratio=[0.0])
    base = {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_num_steps": 10}}
    for k, v in (("cos_min_ratio", -0.5), ("warmup_min_ratio", 1.5)):
        got = _sched_findings({**base, "params": {**base["params"], k: v}})
        assert [f.pointer for f in got["L002"]] == [f"/scheduler/params/{k}"] and not got["L001"], got
    got = _sched_findings({**base, "params": {**base["params"], "warmup_min_ratio": [0.0]}})
    assert [f.pointer for f in got["L001"]] == ["/scheduler/params/warmup_min_ratio"], got
    got = _sched_findings({**base, "params": {**base["params"], "cos_min_ratio": 0.1, "warmup_min_ratio": 0.0}})
    assert got == {"L001": [], "L002": []}


def test_warmup_lr_lists_must_have_one_value_per_param_group():
    """WarmupLR's _format_param (lr_schedules.py): a list must have one value per optimizer param
    group, else ValueError. Lists of different lengths (min vs max) and an empty list fail at any
    group count; a list of 2 fails with one group -- what the HF Trainer builds for a DeepSpeed
    optimizer block (DummyOptim over a flat parameter list) -- and passes with two, so without the
    Trainer it is not flagged."""
    pytest.importorskip("deepspeed")
    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR

    def builds(groups: int, **kw) -> bool:
        ps = [torch.nn.Parameter(torch.zeros(1)) for _ in range(groups)]
        opt = torch.optim.AdamW([{"params": [p]} for p in ps], lr=1e-3)
        try:
            WarmupLR(opt, warmup_num_steps=10, **kw)
            return True
        except ValueError:
            return False

    uneven = dict(warmup_min_lr=[0.0, 0.0], warmup_max_lr=[1e-3])
    assert not any(builds(g, **uneven) for g in (1, 2)) and not any(builds(g, warmup_max_lr=[]) for g in (1, 2))
    assert not builds(1, warmup_max_lr=[1e-3, 1e-3]) and builds(2, warmup_max_lr=[1e-3, 1e-3])
    for params in (uneven, {"warmup_max_lr": []}):
        got = _sched_findings({"type": "WarmupLR", "params": {"warmup_num_steps": 10, **params}})
        assert got["L001"], params
    two = {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": [1e-3, 1e-3]}}
    assert not _sched_findings(two)["L001"]
    (f,) = _sched_findings(two, hf=True, optimizer=True)["L001"]
    assert f.pointer == "/scheduler/params/warmup_max_lr" and "expected 1 value for max_lr, got 2" in f.message
