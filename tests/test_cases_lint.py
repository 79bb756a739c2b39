"""Cases C04, C05 (the finding) and C07 (tests/data/cases) through the CLI: each test names its folder.

Runs ``ds-advisor`` with the case's expect.json command in the case folder, checks the exit code and
that every expected finding (pointer, severity, mentions in message or fix) is present, from the
lint rule family that owns it.
"""

from __future__ import annotations

import json

from advisor.model.inventory import Inventory, TensorSpec
from advisor.views.lint import lint_config
from advisor.config.loading import load_config
from tests.conftest import CASES, run_json


def _findings(out: dict) -> list[dict]:
    return [f for file in out["files"] for f in file["findings"]]


def _check(case: str, command: list[str], exit_code, expected: list[dict], codes: dict[str, str]):
    rc, out = run_json(command, cwd=CASES / case)
    if exit_code is not None:
        assert rc == exit_code, out
    got = _findings(out)
    for want in expected:
        hits = [f for f in got if f["pointer"] == want["pointer"] and f["severity"] == want["severity"]]
        assert hits, f"{case}: no {want['severity']} at {want['pointer']} in {got}"
        f = next((h for h in hits if h["code"] == codes[want["pointer"]]), None)
        assert f is not None, f"{case}: {want['pointer']} not reported as {codes[want['pointer']]}: {hits}"
        for word in want.get("mentions", []):
            assert word in f["message"] + " " + f["fix"], (word, f)
    return got


def test_C04_auto_outside_hf():
    case = "C04-auto-outside-hf"
    expect = json.loads((CASES / case / "expect.json").read_text())
    got = _check(case, expect["command"], expect["exit_code"], expect["findings"],
                 {"/gradient_clipping": "A001", "/zero_optimization/reduce_bucket_size": "A002"})
    rbs = next(f for f in got if f["pointer"] == "/zero_optimization/reduce_bucket_size")
    assert "500000000" in rbs["message"]  # the default DeepSpeed silently uses (case.md)
    # case.md: the optimizer "auto" params are flagged too, at least a warning each.
    for p in ("/optimizer/params/lr", "/optimizer/params/weight_decay"):
        assert any(f["pointer"] == p and f["severity"] in ("warning", "error") for f in got), p
    also = expect["also"]
    rc, out = run_json(also["command"], cwd=CASES / case)
    assert rc == also["exit_code"], out
    assert not [f for f in _findings(out) if f["code"].startswith("A")], out


def test_C05_zero2_bucket_pair_finding():
    """The finding part of C05 (the estimate figures belong to the ledger). expect.json's command is
    ``estimate``; estimate carries lint's findings, so the same flags on ``lint`` must produce it."""
    case = "C05-zero2-bucket-pair"
    expect = json.loads((CASES / case / "expect.json").read_text())
    cmd = ["lint", "config.json", "--params", "340000000", "--world-size", "8", "--format", "json"]
    got = _check(case, cmd, 0, expect["findings"], {"/zero_optimization/reduce_bucket_size": "M003"})
    f = next(f for f in got if f["code"] == "M003")
    # case.md: 500,000,000 x 2 B x 2 = 2,000,000,000 bytes, vs 340,000,000 x 2 B = 680,000,000 of gradients
    assert "2,000,000,000 bytes" in f["message"] and "680,000,000 bytes" in f["message"]


def test_C05_overlap_off_costs_half(tmp_path):
    cfg = json.loads((CASES / "C05-zero2-bucket-pair" / "config.json").read_text())
    cfg["zero_optimization"]["overlap_comm"] = False
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    rc, out = run_json(["lint", str(p), "--params", "340000000", "--world-size", "8", "--format", "json"])
    f = next(f for f in _findings(out) if f["code"] == "M003")
    assert "1,000,000,000 bytes" in f["message"]  # case.md: overlap_comm false -> 1,000,000,000


def test_C07_nvme_param_buffer_too_small():
    case = "C07-nvme-param-buffer-too-small"
    expect = json.loads((CASES / case / "expect.json").read_text())
    got = _check(case, expect["command"], expect["exit_code"], expect["findings"],
                 {"/zero_optimization/offload_param/buffer_size": "M001"})
    f = next(f for f in got if f["code"] == "M001")
    # case.md: fix names a sufficient value and the pinned cost 5 x 525,336,576 x 2 B = 5,253,365,760 bytes
    assert "525336576" in f["fix"] and "5,253,365,760" in f["fix"]


def test_C07_with_hand_built_llama3_8b_inventory():
    """Independent of advisor.model.specs: Llama-3-8B's real tensor shapes (vocab 128256, hidden 4096, 32 layers,
    intermediate 14336, 8 KV heads x 128, untied embeddings)."""
    h, v, inter, kv = 4096, 128256, 14336, 8 * 128
    ts = [TensorSpec("embed", (v, h))]
    for i in range(32):
        ts += [TensorSpec(f"l{i}.q", (h, h)), TensorSpec(f"l{i}.k", (kv, h)), TensorSpec(f"l{i}.v", (kv, h)),
               TensorSpec(f"l{i}.o", (h, h)), TensorSpec(f"l{i}.gate", (inter, h)), TensorSpec(f"l{i}.up", (inter, h)),
               TensorSpec(f"l{i}.down", (h, inter)), TensorSpec(f"l{i}.ln1", (h,)), TensorSpec(f"l{i}.ln2", (h,))]
    ts += [TensorSpec("norm", (h,)), TensorSpec("lm_head", (v, h))]
    inv = Inventory("llama-3-8b (hand-built)", ts)
    assert inv.numel == 8_030_261_248
    loaded = load_config(str(CASES / "C07-nvme-param-buffer-too-small" / "config.json"))
    got = [f for f in lint_config(loaded, world_size=1, inventory=inv) if f.code == "M001"]
    assert len(got) == 1 and got[0].severity == "error"
    assert got[0].data["largest_partition"] == 525_336_576
    assert got[0].data["pinned_bytes"] == 5 * 525_336_576 * 2
    # At 8 ranks the largest partition is ceil(525,336,576 / 8) = 65,667,072 <= 1e8: fits.
    assert [f for f in lint_config(loaded, world_size=8, inventory=inv) if f.code == "M001"] == []
