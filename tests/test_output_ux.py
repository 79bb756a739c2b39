"""What a reader sees at a glance (issue 22): one unit system per output, --units, the fit
table's margin row, colour (--color, NO_COLOR) and piped line width.

Numbers are computed here by hand from the byte counts (GiB = 2^30 B, GB = 1e9 B); the byte
counts themselves are asserted against DeepSpeed elsewhere (tests/test_cases*.py, test_ledger.py).
"""

from __future__ import annotations

import json
import re

import pytest

from advisor.render.style import paint, use_color, wrap
from advisor.units import check_units, rate, size, unit_name

from tests.conftest import CASES, SAMPLES, run_cli

C06 = CASES / "C06-zero2-32b-8gpu"
C06_ARGS = ["estimate", "config.json", "--params", "32763876352", "--world-size", "8", "--gpu-memory", "141GB"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_size_formats_in_one_unit_system():
    assert size(3 * 2**30) == "3.00 GiB" and size(3 * 2**30, suffix=False) == "3.00"
    assert size(2_500_000_000, "GB") == "2.50 GB" and size(2_500_000_000, "gb") == "2.50 GB"
    assert size(2**40, prefix="T") == "1.00 TiB" and size(10**12, "GB", prefix="T") == "1.00 TB"
    assert size(0, zero="-") == "-" and size(None) == "unknown"
    assert rate(2e9) == "1.86 GiB/s" and rate(2e9, "GB") == "2.00 GB/s"  # 2e9 / 2^30 = 1.8626
    assert unit_name("GB") == "GB" and check_units("gib") == "GiB"
    with pytest.raises(ValueError, match="GiB or GB"):
        check_units("MB")


def _fit_rows(text: str) -> list[str]:
    start = text.index("Fit:")
    return text[start:text.index("└", start)].splitlines()


def test_estimate_is_in_gib_by_default_and_in_gb_with_units_gb():
    """C06 (32B ZeRO-2 on 8 x 141 GB): the accelerator peak from --format json, by hand in each unit."""
    d = json.loads(run_cli(C06_ARGS + ["--format", "json"], cwd=C06).stdout)
    acc = next(f for f in d["fit"] if f["tier"] == "accelerator")
    peak, need, cap = acc["peak"], acc["need"], acc["capacity"]
    # each runtime overhead term is its own row (advisor/cluster/overhead.py defaults, by hand): CUDA
    # context 400 MiB, NCCL 1 communicator x 16 channels x 2 x 4 MiB x 2 = 256 MiB, allocator 10%, none else
    assert [p["bytes"] for p in acc["parts"]] == [400 << 20, 256 << 20, -(-peak // 10), 0]
    assert need == peak + sum(p["bytes"] for p in acc["parts"])
    gib = run_cli(C06_ARGS, cwd=C06, env={"COLUMNS": "120"}).stdout
    gb = run_cli(C06_ARGS + ["--units", "GB"], cwd=C06, env={"COLUMNS": "120"}).stdout
    rows = "\n".join(_fit_rows(gib))
    assert f"{peak / 2**30:,.2f}" in rows and f"{-(-peak // 10) / 2**30:,.2f}" in rows
    assert f"{need / 2**30:,.2f}" in rows and f"{cap / 2**30:,.2f}" in rows and "allocator reserve and fragmentation" in rows
    assert f"{need / 1e9:,.2f}" in "\n".join(_fit_rows(gb)) and f"{cap / 1e9:,.2f}" in "\n".join(_fit_rows(gb))
    # one unit system per output: no GB figure in the GiB report, no GiB figure in the GB one
    assert not re.search(r"[0-9] GB\b", gib), re.findall(r".{30}[0-9] GB\b", gib)
    # the findings too: their sizes are rendered in the report's units (JSON keeps the bytes)
    assert not re.search(r"[0-9] GiB\b", gb), re.findall(r".{30}[0-9] GiB\b", gb)
    assert "GiB = 2^30 bytes" in gib and "GB = 1e9 bytes" in gb


def test_units_is_offered_by_every_command_printing_bytes():
    for cmd in ("estimate", "check", "checkpoint", "generate", "report"):
        p = run_cli([cmd, "--help"])
        assert "--units [gib|gb]" in p.stdout.lower(), (cmd, p.stdout[-800:])


def test_verdict_coloured_like_severities_and_no_color_honoured():
    always = run_cli(C06_ARGS + ["--color", "always"], cwd=C06).stdout
    # "DOES NOT FIT" in the same style as the error severity (bold red)
    m = re.search(r"(\x1b\[[0-9;]*m)DOES NOT FIT", always)
    e = re.search(r"(\x1b\[[0-9;]*m)error\x1b\[0m M100", always)
    assert m and e and m.group(1) == e.group(1), always[-1500:]
    never = run_cli(C06_ARGS + ["--color", "never"], cwd=C06).stdout
    assert not ANSI.search(never) and "DOES NOT FIT" in never
    piped = run_cli(C06_ARGS, cwd=C06).stdout  # auto: not a terminal
    assert not ANSI.search(piped)
    assert use_color(open("/dev/null", "w"), "auto") is False
    assert paint("error", True) != "error" and paint("error", False) == "error"


def test_no_color_env_beats_auto(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty(), "auto") is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color(Tty(), "auto") is False and use_color(Tty(), "always") is True
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: only a non-empty value turns colour off
    assert use_color(Tty(), "auto") is True


def test_piped_output_has_no_overlong_lines():
    """Piped (not a terminal, no COLUMNS): at most 100 columns; wrapped lines keep a hanging indent."""
    for args, cwd in ((C06_ARGS, C06), (["lint", str(CASES / "C04-auto-outside-hf" / "config.json")], None),
                      (["checkpoint", str(SAMPLES / "zero2.json"), "--params", "8030261248", "--world-size", "8",
                        "--write-bandwidth", "2GB/s", "--node-mtbf-hours", "20000"], None)):
        p = run_cli(args, cwd=cwd, env={"COLUMNS": ""})
        assert p.stdout and max(len(x) for x in p.stdout.splitlines()) <= 100, \
            max(p.stdout.splitlines(), key=len)
    assert wrap("  " + "word " * 30, 40).splitlines()[1].startswith("      word")


def test_mtbf_and_activations_wording(tmp_path):
    # zero2.json's batch triple is for 8 ranks (64 = 4 x 2 x 8); at 16 ranks DeepSpeed wants 128, and
    # checkpoint refuses a config DeepSpeed refuses (f204250)
    z2 = json.loads((SAMPLES / "zero2.json").read_text())
    z2["train_batch_size"] = 4 * 2 * 16
    cfg = tmp_path / "zero2_w16.json"
    cfg.write_text(json.dumps(z2))
    ck = run_cli(["checkpoint", str(cfg), "--params", "8030261248", "--world-size", "16",
                  "--gpus-per-node", "8", "--write-bandwidth", "2GB/s", "--node-mtbf-hours", "50000"]).stdout
    # 2 nodes: 50,000 h / 2 = 25,000 h; written as a division, never "2 nodes x 50,000 h"
    assert "cluster MTBF 25,000.00 h (node MTBF 50,000 h / 2 nodes)" in " ".join(ck.split())
    from advisor.render.text import activation_words
    ac = {"layers_on_rank": 80, "per_layer": 2**30, "saved_accelerator": 3 * 2**30, "saved_host": 0,
          "recompute_layer": 2**30}
    full = activation_words(ac, True)
    assert "80 layers x" not in full and "keep only their inputs" in full and "3.00 GiB" in full
    # without recompute: 80 layers x 1 GiB kept, and a 2 GiB loss head the row words add
    none = dict(ac, saved_accelerator=82 * 2**30, loss_head=2 * 2**30, recompute_layer=0)
    assert activation_words(none, False) == \
        "no checkpointing: 80 layers x 1.00 GiB each = 80.00 GiB kept for backward"


@pytest.mark.parametrize("text,literal,col", [('{"train_batch_size": NaN}', "NaN", 22),
                                              ('{"train_batch_size": 8, "x": 1e400}', "1e400", 30),
                                              ('{"zero_optimization": {"reduce_bucket_size": -Infinity}}',
                                               "-Infinity", 46)])
def test_non_finite_numbers_are_named_not_the_parser_words(tmp_path, text, literal, col):
    """hjson (DeepSpeed's loader) says "Bad key name (eof)" for NaN and "cannot convert float
    infinity to integer" for 1e400; the advisor names the literal and where it is."""
    p = tmp_path / "c.json"
    p.write_text(text)
    assert text[col - 1:].startswith(literal)
    r = run_cli(["lint", str(p)], env={"COLUMNS": "300"})
    assert r.returncode == 2
    assert f"c.json:1:{col}: non-finite number {literal}: JSON has no NaN or infinity" in r.stderr  # an error
    assert "Bad key name" not in r.stdout + r.stderr and "cannot convert" not in r.stdout + r.stderr
    r = run_cli(["estimate", str(p), "--params", "1000000"], env={"COLUMNS": "300"})
    assert r.returncode == 2 and f"non-finite number {literal}" in r.stderr


def test_hf_config_named_by_its_architecture_not_its_folder(tmp_path):
    from tests.conftest import ROOT
    src = ROOT / "tests" / "fixtures" / "hf" / "Meta-Llama-3-8B" / "config.json"
    d = json.loads(src.read_text())
    assert "_name_or_path" not in d and d["architectures"] == ["LlamaForCausalLM"]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(json.dumps(d))
    r = run_cli(["estimate", str(SAMPLES / "zero2.json"), "--model", "models/config.json", "--format", "json"],
                cwd=tmp_path)
    assert json.loads(r.stdout)["model"]["name"] == "LlamaForCausalLM (models/config.json)"
    (tmp_path / "models" / "config.json").write_text(json.dumps({**d, "_name_or_path": "meta-llama/Meta-Llama-3-8B"}))
    r = run_cli(["estimate", str(SAMPLES / "zero2.json"), "--model", "models/config.json", "--format", "json"],
                cwd=tmp_path)
    assert json.loads(r.stdout)["model"]["name"] == "meta-llama/Meta-Llama-3-8B"
    (tmp_path / "models" / "config.json").write_text(json.dumps({**d, "model_type": "falcon"}))
    r = run_cli(["estimate", str(SAMPLES / "zero2.json"), "--model", "models/config.json"], cwd=tmp_path)
    assert r.returncode == 2 and "unsupported model_type 'falcon'" in r.stderr and "--params N" in r.stderr


def test_refused_config_names_the_optimizer_and_points_at_the_root():
    from advisor.render.text import optimizer_words
    assert optimizer_words({"type": "AdamW", "basic": "", "wrapper": ""}) == \
        "AdamW (not built: DeepSpeed refuses this config, see the findings)"
    assert optimizer_words({"type": "AdamW", "basic": "FusedAdam", "wrapper": "DeepSpeedZeroOptimizer"}) == \
        "AdamW -> FusedAdam wrapped by DeepSpeedZeroOptimizer"


def test_hf_trainer_config_without_hf_is_one_hint_in_text_every_finding_in_json():
    cfg = str(SAMPLES / "hf_trainer_zero3_auto.json")
    d = json.loads(run_cli(["lint", cfg, "--format", "json"]).stdout)
    autos = [f for f in d["files"][0]["findings"] if f["code"] in ("A001", "A002", "A003")]
    n = json.dumps(json.loads((SAMPLES / "hf_trainer_zero3_auto.json").read_text())).count('"auto"')
    assert len(autos) == n == 17  # one finding per "auto" value of the file
    p = run_cli(["lint", cfg], env={"COLUMNS": "300"})
    assert p.returncode == 1
    body = p.stdout.splitlines()
    assert sum("this looks like an HF Trainer config" in x for x in body) == 1
    assert '17 values are "auto"' in p.stdout and "--hf" in p.stdout
    assert not any(" A003 /optimizer/params/lr" in x for x in body)  # folded into the hint
    # the tally counts the finding lines shown (the hint is one error line), not the 17 it folds
    # (12 errors and 5 warnings in JSON): counted here from the body, not from the renderer
    shown = {s: sum(bool(re.match(rf"^\S.*?: {s} [A-Z]\d{{3}} ", x)) for x in body) for s in ("error", "warning", "info")}
    assert shown == {"error": 1, "warning": 0, "info": 0}, body
    assert "1 file(s): 1 error(s), 0 warning(s), 0 info" in p.stdout


def test_missing_extra_message_fits_the_install(monkeypatch, tmp_path):
    import advisor.install as inst
    from tests.conftest import ROOT
    assert inst.source_checkout() == ROOT  # the tests run from a checkout
    assert inst.extra_command("report") == f"pip install -e '{ROOT}[report]'"
    monkeypatch.setattr(inst, "source_checkout", lambda: None)  # an installed wheel
    assert inst.extra_command("report") == "pip install 'deepspeed-advisor[report]'"


def test_measure_reports_op_builds_from_the_launch_log(tmp_path):
    """The words torch.utils.cpp_extension / DeepSpeed's OpBuilder print while building an op
    become progress lines (measure was silent for minutes while cpu_adam compiled)."""
    import threading
    import time

    from advisor.engine.measure import _watch_log

    log = tmp_path / "launch.log"
    log.write_text("Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...\n"
                   "Building extension module cpu_adam...\n")
    got: list[str] = []
    stop = threading.Event()
    t = threading.Thread(target=_watch_log, args=(str(log), got.append, stop, 0.2), daemon=True)
    t.start()
    time.sleep(1.0)
    with open(log, "a") as fh:
        fh.write("Loading extension module cpu_adam...\nTime to load cpu_adam op: 171.2 seconds\n")
    time.sleep(1.0)
    stop.set()
    t.join(5)
    assert got[0].startswith("building DeepSpeed op cpu_adam (the first build takes minutes")
    assert "loaded DeepSpeed op cpu_adam" in got and "op cpu_adam ready after 171.2 s" in got
    assert any(x.startswith("still running (") for x in got)


def test_non_finite_scan_reads_numbers_whole():
    """The scan for non-finite literals takes each number token whole: a long digit run is one
    finite integer (hjson keeps it an int), a long decimal past float range is named, and a digit
    run in a string is skipped. (A pattern that required an exponent backtracked over every digit
    run: a fuzzed 1 MB file took minutes; tests/robustness/test_fuzz_cli.py bounds the whole folder.)"""
    from advisor.config.loading import non_finite_literal
    digits = "7" * 5000
    assert non_finite_literal('{"a": %s}' % digits) is None
    assert non_finite_literal('{"a": "%se999"}' % digits) is None          # inside a string
    big = "9" * 400 + ".5"                                                   # > 1.8e308 as a float
    assert non_finite_literal('{"a": %s}' % big) == (big, 6)
    assert non_finite_literal('{"a": 1.0e308, "b": 2e308}') == ("2e308", 20)


def _no_other_unit(text: str, units: str) -> None:
    """No size of the other unit system anywhere in ``text`` (GiB/MiB/TiB vs GB/MB/TB; rates too)."""
    other = r"(?:GB|MB|TB)" if units == "GiB" else r"(?:GiB|MiB|TiB)"
    bad = re.findall(rf".{{40}}[0-9] {other}\b.{{0,20}}", text)
    assert not bad, bad


@pytest.mark.parametrize("units,base", [("GiB", 2**30), ("GB", 1e9)])
def test_estimate_findings_follow_units(units, base):
    """C06's M100 names need, capacity and what it is over by: in the text report each equals the
    JSON's bytes (data) / 2^30 or / 1e9, and the whole report (findings included) is in one system."""
    d = json.loads(run_cli(C06_ARGS + ["--format", "json"], cwd=C06).stdout)
    m100 = next(f for f in d["findings"] if f["code"] == "M100")
    need, cap, over = m100["data"]["need"], m100["data"]["capacity"], m100["data"]["over"]
    assert over == need - cap and cap == 141 * 10**9
    # JSON keeps bytes plus a message that does not depend on --units (the default unit system)
    assert f"{need / 2**30:,.2f} GiB" in m100["message"]
    args = C06_ARGS + (["--units", units] if units == "GB" else [])
    text = run_cli(args, cwd=C06, env={"COLUMNS": "400"}).stdout
    line = next(x for x in text.splitlines() if " M100 " in x)
    # C06 runs --params: no activations, so the need is a floor (M104) and M100 says ">=" / "at least"
    assert (f"needs >= {need / base:,.2f} {units} at its peak" in line and f"only {cap / base:,.2f} {units} is "
            "available" in line and f"over by at least {over / base:,.2f} {units}" in line), line
    _no_other_unit(text, units)
    assert json.loads(run_cli(C06_ARGS + ["--format", "json", "--units", "GB"], cwd=C06).stdout)["findings"] \
        == d["findings"]  # --units changes the text only


@pytest.mark.parametrize("units,mega", [("GiB", ("MiB", 2**20)), ("GB", ("MB", 1e6))])
def test_lint_findings_follow_units(units, mega):
    """M003 on sample_configs/zero2.json with a 1M-parameter model: the bucket is 200,000,000
    elements x 2 B x 2 (overlap_comm) = 800,000,000 B (reduce_bucket_size x B x (1 + overlap_comm),
    deepspeed/runtime/zero/stage_1_and_2.py), the gradients 1,000,000 x 2 B = 2,000,000 B."""
    args = ["lint", str(SAMPLES / "zero2.json"), "--params", "1000000", "--world-size", "1"]
    d = json.loads(run_cli(args + ["--format", "json"]).stdout)
    m003 = next(f for r in d["files"] for f in r["findings"] if f["code"] == "M003")
    assert m003["data"]["bucket_bytes"] == 200_000_000 * 2 * 2 and m003["data"]["gradient_bytes"] == 2_000_000
    text = " ".join(run_cli(args + ["--units", units]).stdout.split())
    name, b = mega
    assert f"800,000,000 bytes ({800_000_000 / b:,.2f} {name})" in text, text
    assert f"2,000,000 bytes ({2_000_000 / b:,.2f} {name})" in text, text
    _no_other_unit(text, units)


@pytest.mark.parametrize("units,base", [("GiB", 2**30), ("GB", 1e9)])
def test_cpu_optimizer_line_follows_units(units, base):
    """estimate's step-time CPU optimizer line (ZeRO-2, optimizer on the CPU, dgx-h100): its bytes
    per rank and bytes/s per rank are the JSON term's amount and rate / 2^30 or / 1e9."""
    args = ["estimate", str(SAMPLES / "zero2.json"), "--model", "llama-3.2-1b", "--hardware", "dgx-h100",
            "--seq-len", "1024", "--set", "zero_optimization.offload_optimizer.device=cpu"]
    d = json.loads(run_cli(args + ["--format", "json"]).stdout)
    term = next(t for t in d["step_time"]["terms"] if t["name"] == "cpu_optimizer")
    text = run_cli(args + ["--units", units], env={"COLUMNS": "400"}).stdout
    line = next(x for x in text.splitlines() if "CPU optimizer:" in x)
    assert f"{term['amount'] / base:,.1f} {units} per rank per step" in line, line
    assert f"at {term['rate'] / base:,.1f} {units}/s per rank" in line, line
    _no_other_unit(text, units)


@pytest.mark.parametrize("units", ["GiB", "GB"])
def test_state_and_timeline_columns_name_the_unit_in_their_header(units):
    """The state and timeline tables name the unit in each tier column's header (as the fit
    table does), not only in the title: the header cell under accelerator/host/nvme is --units."""
    text = run_cli(C06_ARGS + ["--units", units], cwd=C06, env={"COLUMNS": "200"}).stdout
    lines = text.splitlines()
    for title in ("Per-rank training state, ", "Step timeline, "):
        k = next(i for i, x in enumerate(lines) if x.startswith(title))
        assert lines[k + 1].startswith("┏"), lines[k:k + 4]
        unit = [c.strip() for c in lines[k + 3].strip("┃").split("┃")]
        head = [c.strip() for c in lines[k + 2].strip("┃").split("┃")]
        assert head[1:] == (["accelerator", "host (pinned+pageable)", "nvme"] if "state" in title
                            else ["accelerator", "host", "nvme"]), head
        assert unit[1:] == [units] * 3, (title, unit)


@pytest.mark.parametrize("units,mega", [("GiB", ("MiB", 2**20)), ("GB", ("MB", 1e6))])
def test_m003_says_elements_as_elements_and_bytes_in_units(units, mega):
    """M003 names element counts as elements, grouped like the byte counts (it printed raw
    "200000000" next to "800,000,000 bytes"), and every byte figure in --units: zero2.json's
    bucket 200,000,000 elements x 2 bytes x 2 (overlap_comm) against 1,000,000 gradient elements
    x 2 bytes; the fix's smallest bucket is the model's 1,000,000 elements, saving
    800,000,000 - 1,000,000 x 2 x 2 = 796,000,000 bytes."""
    args = ["lint", str(SAMPLES / "zero2.json"), "--params", "1000000", "--world-size", "1", "--units", units]
    text = " ".join(run_cli(args, env={"COLUMNS": "400"}).stdout.split())
    name, b = mega
    assert "reduce_bucket_size 200,000,000 elements exceeds the model's 1,000,000 gradient elements" in text, text
    assert "= 200,000,000 elements x 2 bytes x 2 (" in text, text
    assert (f"fix: set zero_optimization.reduce_bucket_size to at most 1000000 (1,000,000 elements), saving "
            f"796,000,000 bytes ({796_000_000 / b:,.2f} {name})") in text, text
    assert not re.search(r"\b\d{5,}\b(?! \(1,000,000 elements\))", text.split("M003", 1)[1].split("fix:")[0]), text
    _no_other_unit(text, units)


def test_a_size_flag_in_the_other_unit_system_is_echoed_once():
    """--gpu-memory 80GB is 80 x 10^9 bytes: a GiB report says once on stderr that it read
    80,000,000,000 / 2^30 = 74.51 GiB; 141GiB in a GB report is 141 x 2^30 = 151,397,597,184 bytes
    = 151.40 GB; a flag in the report's own system, and --format json, say nothing."""
    base = ["estimate", "config.json", "--params", "32763876352", "--world-size", "8"]
    err = run_cli(base + ["--gpu-memory", "80GB"], cwd=C06, env={"COLUMNS": "400"}).stderr
    want = f"ds-advisor: --gpu-memory 80GB = 80,000,000,000 bytes = {80e9 / 2**30:.2f} GiB (GB = 1e9 bytes"
    assert [x for x in err.splitlines() if "--gpu-memory" in x] and \
        sum(x.startswith(want) for x in err.splitlines()) == 1, err
    err = run_cli(base + ["--gpu-memory", "141GiB", "--units", "GB"], cwd=C06, env={"COLUMNS": "400"}).stderr
    assert f"--gpu-memory 141GiB = {141 * 2**30:,} bytes = {141 * 2**30 / 1e9:.2f} GB" in err, err
    for args in (["--gpu-memory", "80GB", "--units", "GB"], ["--gpu-memory", "80GiB"],
                 ["--gpu-memory", "80GB", "--format", "json"]):
        assert "--gpu-memory" not in run_cli(base + args, cwd=C06).stderr, args


def test_measure_says_where_it_builds_ops_before_launching(tmp_path, monkeypatch):
    """Before the launch (the launch itself mocked: no engine runs), measure says it builds
    DeepSpeed's ops and where: TORCH_EXTENSIONS_DIR as set, and which ops are already built
    there (a ``.so`` under <root>/<python tag>/<op>/, torch.utils.cpp_extension's layout)."""
    import advisor.engine.measure as m

    root = tmp_path / "ext"
    (root / "py311_cpu" / "cpu_adam").mkdir(parents=True)
    (root / "py311_cpu" / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(root))
    launched: list[str] = []
    got: list[str] = []
    monkeypatch.setattr(m, "run_process_group", lambda cmd, timeout_s, **kw: launched.append(got[:]) or 1)
    cell = {"id": "c", "config": {"train_micro_batch_size_per_gpu": 1}, "inventory": {"tensors": []}}
    with pytest.raises(m.MeasureError):
        m.run_measure_many([cell], 1, workdir=str(tmp_path), progress=got.append)
    (before,) = launched  # what was said before the launch started
    assert before[0] == (f"building DeepSpeed's ops on first use (1-3 minutes per op, once) under {root} "
                         "(TORCH_EXTENSIONS_DIR); already built there: cpu_adam")
    assert before[1].startswith("launching 1 rank(s) of DeepSpeed")


def test_tight_verdict_is_coloured_where_it_wraps_in_the_line_form():
    """The fit's line form (a 100-199 column terminal) wraps the long TIGHT verdict: its first word
    is then not on the last line, which alone was styled, so TIGHT went uncoloured (issue 22)."""
    d = json.loads(run_cli(C06_ARGS[:-1] + ["2000GB", "--format", "json"], cwd=C06).stdout)
    need = next(f for f in d["fit"] if f["tier"] == "accelerator")["need"]
    cap = f"{-(-need // 2**30) + 1}GiB"  # 1-2 GiB of headroom: inside the overhead band, so TIGHT
    args = C06_ARGS[:-1] + [cap, "--color", "always"]
    acc = next(f for f in json.loads(run_cli(args[:-2] + ["--format", "json"], cwd=C06).stdout)["fit"]
               if f["tier"] == "accelerator")
    assert acc["verdict"] == "tight", acc
    table = run_cli(args, cwd=C06, env={"COLUMNS": "200"}).stdout  # the table form: the reference style
    code = re.search(r"(\x1b\[[0-9;]*m)TIGHT", table).group(1)
    lines = run_cli(args, cwd=C06, env={"COLUMNS": "120"}).stdout
    at = lines.index("= need per rank")
    verdict = lines[at:lines.index("\nhost", at)]  # "host:" or "host, per node (N ranks):" (78f334a)
    assert "│" not in verdict and "\n" in verdict, verdict  # the line form, the verdict wrapped
    assert code + "TIGHT" in verdict, verdict
    # the continuation line is coloured too, and nothing before the verdict is
    assert all(line.lstrip().startswith(code) for line in verdict.splitlines()[1:]), verdict
    assert not ANSI.search(verdict[:verdict.index("TIGHT") - len(code)])
