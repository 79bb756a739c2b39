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
