"""Issue 22's last newcomer defects: every table at 60 / 80 columns, the unit echo of every size
and bandwidth flag, one unit per checkpoint column, one-line usage errors, lint's errors on
stderr, and the wording a newcomer misread.

The expected numbers come from the command's own JSON (bytes, divided here by the unit's base)
or from a cited formula; the text is checked for its layout (each value on its label's line, no
cut cell), never pinned as a whole (the goldens do that, deliberately).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import CASES, run_cli

C06 = CASES / "C06-zero2-32b-8gpu"
C10 = CASES / "C10-nvme-writes-per-step"
V = ("--deepspeed-version", "0.19.8")


def _overlong(text: str, width: int) -> list[str]:
    """Lines longer than ``width`` that had a place to fold (more than one word)."""
    return [x for x in text.splitlines() if len(x) > width and len(x.split()) > 1]


def _g(n: int, base: int = 2**30) -> str:
    return f"{n / base:,.2f}"


ESTIMATES = {
    "c06-llama8b": (C06, ["estimate", "config.json", "--world-size", "8", "--model", "llama-3.1-8b", "--seq-len",
                          "2048", "--gpu-memory", "80GB", *V]),
    "c10-nvme": (C10, ["estimate", "config.json", "--params", "6700000000", "--world-size", "1", "--host-memory",
                       "512GiB", "--step-time", "10", *V]),
}


@pytest.mark.parametrize("cols", [60, 80])
@pytest.mark.parametrize("name", sorted(ESTIMATES))
def test_every_estimate_table_keeps_labels_with_values_when_narrow(name, cols):
    """At 60 and 80 columns no cell is cut ("capaci…") and no line could have folded; the state,
    fit and movement figures (from the JSON, in GiB) each sit on the line of their label."""
    cwd, args = ESTIMATES[name]
    d = json.loads(run_cli([*args, "--format", "json"], cwd=cwd).stdout)
    p = run_cli(args, cwd=cwd, env={"COLUMNS": str(cols)})
    assert p.returncode in (0, 1), p.stderr
    text = p.stdout
    assert "…" not in text, [x for x in text.splitlines() if "…" in x]
    assert not _overlong(text, cols), _overlong(text, cols)
    lines = text.splitlines()
    # the fit: the peak, each part and the need on the line that names them
    for f in d["fit"]:
        assert any(x.startswith(f"{f['tier']}") and "peak live" in x and _g(f["peak"]) in x for x in lines) or \
            any(x.startswith("│ " + f["tier"]) and _g(f["peak"]) in x for x in lines), (f["tier"], text)
        for part in f.get("parts") or []:
            want = f"+ {part['label']} {_g(part['bytes'])} GiB"
            assert any(want in x for x in lines) or any(
                f"+ {part['label'].split()[0]}" in x and _g(part["bytes"]) in x for x in lines), (want, text)
        need = _g(f["need"])
        assert any("= need" in x and need in x for x in lines), (need, text)
    # the movement rows: the item and its size on one line (a record or a row)
    mv = d.get("movement") or {"ranks": []}
    for m in (mv["ranks"][0]["movements"] if mv["ranks"] else []):
        assert any(m["item"] in x for x in lines), m
        size = _g(m["bytes"])
        # the text names the link the bytes cross (9f9b92a): collectives within a node over the peer link,
        # across nodes over the network; other links by their JSON name
        label = {"within_node": "peer link", "across_nodes": "network"}.get(m.get("crosses"), m["link"])
        assert any(label in x and m["direction"] in x for x in lines), m
        assert any(size in x and ("GiB: " in x or m["item"] in x) for x in lines), (m, size)
    # the state table: each total on the line of its tier's label (a row or a record)
    r = max(d["ranks"], key=lambda r: r["peak"]["accelerator"]["bytes"])
    acc = _g(r["tiers"]["accelerator"]["total"])
    assert any(x.startswith(("sum of the rows", "│ sum of the rows")) and acc in x for x in lines), (acc, text)


C09 = CASES / "C09-checkpoint-size-8b"


@pytest.mark.parametrize("units,base", [("GB", 10**9), ("GiB", 2**30)])
@pytest.mark.parametrize("params", ["80302612", "8030261248"])
def test_checkpoint_file_column_is_the_reports_gigabyte_unit(units, base, params):
    """One unit per column, as the state table: "tensor GB" (GiB) whatever the files' sizes (a
    small model's files were "tensor MB"); each file's figure is its JSON bytes / the base."""
    args = ["checkpoint", "config.json", "--params", params, "--world-size", "8", *V]
    files = json.loads(run_cli([*args, "--format", "json"], cwd=C09).stdout)["files"]
    text = run_cli([*args, "--units", units], cwd=C09, env={"COLUMNS": "120"}).stdout
    head = next(x for x in text.splitlines() if "file (under save_dir)" in x)
    assert head.split()[-2:] == ["tensor", units], head
    assert "MB" not in text.replace("GB", "") and "MiB" not in text
    big = max(files, key=lambda f: f["bytes"])
    assert any(big["path"].split("/")[-1][:12] in x and x.split()[-1] == f"{big['bytes'] / base:,.2f}"
               for x in text.splitlines()), (big, text)


@pytest.mark.parametrize("args,said", [
    (["estimate", "config.json", "--params", "80302612", "--runtime-overhead", "cuda_context=600MB,nccl=1GiB"],
     "--runtime-overhead cuda_context=600MB = 600,000,000 bytes = 0.56 GiB"),
    (["estimate", "config.json", "--params", "80302612", "--runtime-overhead", "3GiB", "--units", "GB"],
     "--runtime-overhead 3GiB = 3,221,225,472 bytes = 3.22 GB"),
    (["checkpoint", "config.json", "--params", "80302612", "--write-bandwidth", "2GB/s"],
     "--write-bandwidth 2GB/s = 2,000,000,000 bytes/s = 1.86 GiB/s"),
    (["checkpoint", "config.json", "--params", "80302612", "--write-bandwidth", "2GB/s", "--read-bandwidth",
      "5GiB/s", "--units", "GB"], "--read-bandwidth 5GiB/s = 5,368,709,120 bytes/s = 5.37 GB/s"),
])
def test_every_size_and_bandwidth_flag_in_the_other_unit_system_is_echoed_once(args, said):
    """A size said in the other unit system than --units is echoed once on stderr with what it was
    read as (600e6 / 2^30 = 0.56; 3 x 2^30 / 1e9 = 3.22; 2e9 / 2^30 = 1.86; 5 x 2^30 / 1e9 = 5.37),
    and a size already in the report's system is not."""
    p = run_cli([*args, "--world-size", "8", *V], cwd=C09, env={"COLUMNS": "200"})
    assert p.returncode in (0, 1), p.stderr
    notes = [x for x in p.stderr.splitlines() if x.startswith("ds-advisor: --")]
    assert [x for x in notes if said in x] and len([x for x in notes if said in x]) == 1, p.stderr
    assert len(notes) == 1, notes  # nccl=1GiB under GiB, 2GB/s under GB: not echoed


@pytest.mark.parametrize("value,words", [
    ("80000000000", "write 80000000000B if it is bytes (80.00 GB = 74.51 GiB)"),
    ("80", "write 80GB (10^9 bytes), 80GiB (2^30 bytes) or 80B (bytes)"),
])
def test_a_bare_number_gets_a_suggestion_that_reads_as_a_size(value, words):
    """80000000000 with no unit is a byte count: the suggestion is 80000000000B with its GB
    (8e10 / 1e9 = 80.00) and GiB (8e10 / 2^30 = 74.51), never "80000000000GB"."""
    p = run_cli(["estimate", "config.json", "--params", "1000", "--gpu-memory", value], cwd=C06)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert words in p.stderr and "80000000000GB" not in p.stderr, p.stderr


@pytest.mark.parametrize("args,words", [
    (["estimate", "config.json", "--params", "1000", "--world-size", "0"],
     "ds-advisor: estimate: invalid value for '--world-size': 0 is not in the range 1<=x<="),
    (["estimate", "config.json", "--params", "1000", "--step-time", "nan"],
     "ds-advisor: estimate: invalid value for '--step-time': 'nan' is not a finite number"),
    (["estimate", "config.json", "--bogus"], "ds-advisor: estimate: no such option '--bogus'"),
    (["estimate"], "ds-advisor: estimate: missing argument 'CONFIG'"),
    (["estmate"], "ds-advisor: no such command 'estmate'; did you mean 'estimate'?"),
    (["--bogus"], "ds-advisor: no such option '--bogus'"),
])
def test_click_usage_errors_are_one_line_exit_2(args, words):
    """The bad-input contract (advisor/errors.py: exit 2, one line naming the option and the
    problem) holds for click's own usage errors too: no "Usage:" / "Try ..." block."""
    p = run_cli(args, cwd=C06)
    assert p.returncode == 2, p
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1 and p.stderr.startswith(words), p.stderr


def test_lint_of_a_missing_file_says_so_on_stderr_and_counts_it_on_stdout(tmp_path):
    """An unreadable file is an error: its line goes to stderr (one line, exit 2), stdout keeps
    the report of the files that were read and the tally, which counts it as unreadable."""
    good = tmp_path / "ds.json"
    good.write_text('{"train_micro_batch_size_per_gpu": 1}')
    p = run_cli(["lint", "nonexist.json", str(good)], cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.splitlines() == ["ds-advisor: nonexist.json: no such file (and not a base64-encoded config "
                                     "either)"], p.stderr
    assert "nonexist.json" not in p.stdout and "2 file(s): " in p.stdout and "1 unreadable" in p.stdout, p.stdout
    q = run_cli(["lint", "-q", "nonexist.json"], cwd=tmp_path)
    assert q.returncode == 2 and q.stdout == "" and "nonexist.json: no such file" in q.stderr


def test_recompute_text_says_what_one_layer_adds_and_what_was_freed_before_it():
    """Full checkpointing, eager attention (llama-3.1-8b, seq 4096, micro-batch 1, 8 ranks): the
    text names the recomputed layer's own backward peak (eager_recompute_peak, called here on
    the model's architecture with the layer's saved activations = per_layer), the loss head's
    tensors freed by then (loss head less the 16-bit logits the model returns, D s b V) and the
    net they make, rather than only the net (4.17 GiB read against the layer's 6.4 GiB peak)."""
    from advisor.model.activations import eager_recompute_peak
    from advisor.model.specs import preset_inventory

    args = ["estimate", "config.json", "--world-size", "8", "--model", "llama-3.1-8b", "--seq-len", "4096",
            "--checkpointing", "full", "--attention", "eager", *V]
    d = json.loads(run_cli([*args, "--format", "json"], cwd=C06).stdout)
    ac = d["ranks"][0]["activations"]
    meta = preset_inventory("llama-3.1-8b").meta
    s, b, D, V_ = 4096, 1, 2, int(meta["vocab_size"])
    gross = eager_recompute_peak(meta, s, b, D, ac["per_layer"])
    freed = ac["loss_head"] - D * s * b * V_  # the model's output logits stay
    assert (ac["recompute_layer_peak"], ac["recompute_freed"]) == (gross, freed)
    assert ac["recompute_layer"] == gross - freed
    text = " ".join(run_cli(args, cwd=C06, env={"COLUMNS": "200"}).stdout.split())
    assert (f"{_g(gross)} GiB at that layer's backward peak, less {_g(freed)} GiB backward has freed by then "
            f"(the loss head's tensors) = +{_g(gross - freed)} GiB on top of what is saved") in text, text


def test_generate_suggests_each_nearby_global_batch_once():
    """--global-batch 4 on 8 data-parallel ranks (--no-model-parallel: data parallelism alone): the
    multiples of 8 around 4 are 0 (no batch) and 8, said once ("use 8", it said "use 8 or 8");
    20 -> 16 or 24. Without --no-model-parallel a layout whose data-parallel size divides 4 runs,
    and its note names the same multiples, 8 once."""
    base = ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
            "--seq-len", "2048", *V]
    p = run_cli([*base, "--global-batch", "4", "--no-model-parallel"])
    assert p.returncode == 2 and p.stderr.rstrip().endswith("(= 1 node x 8 GPUs): use 8"), p.stderr
    p = run_cli([*base, "--global-batch", "20", "--no-model-parallel"])
    assert p.returncode == 2 and p.stderr.rstrip().endswith("use 16 or 24"), p.stderr
    p = run_cli([*base, "--global-batch", "4", "--format", "json"])
    assert p.returncode == 0, p.stderr
    notes = [n for n in json.loads(p.stdout)["notes"] if "not a multiple of the world 8" in n]
    assert len(notes) == 1 and "--global-batch 8 would allow" in notes[0], notes


@pytest.mark.parametrize("flags,low_cpu,sixteen", [((), False, True), (("--no-low-cpu-mem-usage",), True, True),
                                                   (("--load-dtype", "bf16", "--no-low-cpu-mem-usage"), True, False)])
def test_m101_fix_names_only_what_the_estimate_did_not_assume(flags, low_cpu, sixteen):
    """M101 (8 ranks each loading llama-3.1-8b at ZeRO-2, 64 GB of host memory): low_cpu_mem_usage
    is assumed on (one copy), so the fix names it only under --no-low-cpu-mem-usage; 16-bit
    loading only when the load dtype is fp32."""
    args = ["estimate", "config.json", "--world-size", "8", "--model", "llama-3.1-8b", "--seq-len", "2048",
            "--host-memory", "64GB", *flags, "--format", "json", *V]
    d = json.loads(run_cli(args, cwd=C06).stdout)
    fix = next(f["fix"] for f in d["findings"] if f["code"] == "M101")
    assert ("low_cpu_mem_usage=True" in fix) == low_cpu, fix
    assert ("load in 16-bit" in fix) == sixteen, fix


def test_m003_zero3_bucket_exists_only_with_contiguous_gradients(tmp_path):
    """DeepSpeed 0.19.8's stage3.py allocates the ipg bucket buffers under ``if
    self.contiguous_gradients:`` (read from the installed source here); explain says so, and
    M003 fires for ZeRO-3 with a 5e8 bucket over 1e6 parameters only when it is on."""
    import re
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("deepspeed is not installed: the source fact cannot be read")
    src = (Path(list(spec.submodule_search_locations)[0]) / "runtime" / "zero" / "stage3.py").read_text()
    assert re.search(r"if self\.contiguous_gradients:\n\s+for dtype, bucket in self\.ipg_buckets\.items\(\):\n"
                     r"\s+bucket\.buffer = torch\.empty\(self\.reduce_bucket_size", src)
    text = " ".join(run_cli(["explain", "M003"]).stdout.split())
    assert "ZeRO-3 with contiguous_gradients" in text and "ZeRO-3: RBS" not in text
    for contiguous, fires in ((True, True), (False, False)):
        cfg = tmp_path / f"z3_{contiguous}.json"
        cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                   "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8,
                                                         "contiguous_gradients": contiguous}}))
        d = json.loads(run_cli(["lint", str(cfg), "--params", "1000000", "--world-size", "1", "--format", "json",
                                *V]).stdout)
        assert any(f["code"] == "M003" for f in d["files"][0]["findings"]) == fires, (contiguous, d)


def test_a_folded_line_never_splits_a_number_from_its_unit():
    """check's overhead lines at 60 columns folded "(band 0.03 | GB-0.54 GB)": a number and its
    unit are one word for the folding (style.wrap), each size still whole, no word lost."""
    from advisor.render.style import wrap

    line = ("          + NCCL communicator buffers 0.27 GB (band 0.03 GB-0.54 GB): 1 communicator(s) x 16 "
            "channels x 2 (send, recv) x NCCL_BUFFSIZE 4,194,304 B x 2 protocols, 12.3 s, 1,234.56 GiB")
    for cols in range(40, 90):
        out = wrap(line, cols)
        assert " ".join(out.split()) == " ".join(line.split())
        for x in out.splitlines():
            assert not x.rstrip().endswith(("0.27", "0.03", "4,194,304", "12.3", "1,234.56")), (cols, x)
            assert len(x) <= cols, (cols, x)


def test_a_record_never_splits_a_number_from_its_unit():
    """generate's "why" cell, the prose at the end of a record, folded "compute 0.31 | s of 0.32 s"
    at 60 columns: the records fold it with each size whole."""
    from advisor.render.style import records

    rows = [("#", "stage", "why"), ("1", "0", "within 3% of the fastest and simplest; compute 0.31 s of 0.32 s")]
    for cols in range(30, 70):
        for x in records(rows, cols):
            assert not x.rstrip().endswith(("0.31", "0.32")), (cols, x)


def test_check_names_the_parameter_count_once():
    """--params 1000000: the model is named by its count; "(1,000,000 parameters)" repeated it."""
    p = run_cli(["check", "config.json", "--params", "1000000", "--world-size", "1", "--gpu-memory", "80GB",
                 "--host-memory", "64GB", *V], cwd=C06)
    first = p.stdout.splitlines()[0]
    assert first.count("1,000,000") == 1, first


@pytest.mark.parametrize("code", ["B001", "M003", "M101"])
def test_explain_refills_paragraphs_to_a_narrow_terminal(code):
    """explain at 60 columns: each paragraph is refilled (its source is hard-wrapped near 100), so
    a line followed by more of the same paragraph has no room left for the next word (10 columns
    of slack for the markup dropped after folding); it folded each source line alone, leaving
    stubs like "  inside deepspeed.initialize), with" before "W the data-parallel ..."."""
    from advisor.render.explain import rst_text
    from advisor.rules import all_rules

    rule = all_rules()[code]
    text = rst_text(rule.explanation(), cols=60)
    lines = text.splitlines()
    assert all(len(x) <= 60 or x.startswith("    ") for x in lines), lines  # literal blocks stay verbatim
    for a, b in zip(lines, lines[1:]):
        if not a.strip() or not b.strip() or b.lstrip().startswith(("* ", "- ", '"')) or a.startswith("    "):
            continue
        if (len(b) - len(b.lstrip())) not in (0, 2):  # a literal block
            continue
        assert len(a) + 1 + len(b.split()[0]) > 50, (a, b)


def test_units_choice_is_shown_as_spelled():
    """--units is case-insensitive, but its help and error name GiB and GB as written; click
    lower-cased them ("[gib|gb]", "is not one of 'gib', 'gb'")."""
    h = run_cli(["estimate", "--help"]).stdout
    assert "--units [GiB|GB]" in h and "[gib|gb]" not in h
    p = run_cli(["estimate", "x.json", "--params", "5", "--units", "gx"])
    assert p.returncode == 2 and "'gx' is not GiB or GB" in p.stderr, p.stderr


def test_a_coloured_line_folds_at_its_visible_width():
    """On a colour terminal a finding's severity carries ANSI codes that take no columns: the line
    folds where its visible text reaches the width (it folded 11 columns early, "error" alone
    ending the first line), the codes kept around the same word, no word lost."""
    import re

    from advisor.render.style import paint, wrap

    line = ("x.json:1:2: " + paint("error", True) + " A001 /: this looks like an HF Trainer config: 12.5 GiB, 17 "
            "values are auto")  # a size: its no-break glue must not lose the colour
    plain = re.sub(r"\033\[[0-9;]*m", "", line)
    for cols in range(30, 80):
        out = wrap(line, cols)
        vis = re.sub(r"\033\[[0-9;]*m", "", out)
        assert " ".join(vis.split()) == " ".join(plain.split()) and paint("error", True) in out
        assert vis == wrap(plain, cols), cols  # the same folding as without colour


def test_lint_tally_folds_on_a_terminal_and_stays_whole_piped(monkeypatch):
    """The tally is kept whole for scripts reading a pipe; on a terminal (60 columns) it folds like
    every line, no word lost."""
    from advisor.render import render
    from advisor.render.lint import FileResult

    class Tty:
        def isatty(self):
            return True

        def write(self, s):
            return len(s)

    monkeypatch.setenv("COLUMNS", "60")
    results = [FileResult(file="a.json"), FileResult(file="b.json", error="b.json: no such file"),
               FileResult(file="c.json", skipped="no DeepSpeed key")]
    piped = render("lint", "text", results, color="never")  # pytest's stdout: a pipe
    tty = render("lint", "text", results, stream=Tty(), color="never")
    tally = piped.splitlines()[-1]
    assert tally.startswith("3 file(s): ") and len(tally) > 60, piped  # kept whole for scripts
    assert all(len(x) <= 60 for x in tty.splitlines()), tty
    assert " ".join(tty.split()) == " ".join(piped.split())
