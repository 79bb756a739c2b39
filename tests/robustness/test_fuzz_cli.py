"""Fuzzing the CLI with mutated real configs: never a traceback, never a damaged file.

Contract under test (README, advisor/errors.py): every command exits 0 or 1 on any readable
config, and exits 2 with a one-line reason for unreadable input (not JSON/HJSON, duplicate keys,
not UTF-8, over the size limit, nested too deeply, not an object). No input ever produces a
Python traceback, and no config value is ever executed, imported or fetched.

Every config of tests/data/corpus is mutated by each operator below (wrong types,
removed keys, deep nesting, huge and negative numbers, NaN/Infinity literals, non-UTF-8 bytes,
duplicate keys, truncation, ...). To keep the run short, mutated files are written into one
folder and linted by a single real ``ds-advisor lint`` process per output format; estimate and
check go through click's CliRunner in-process (the library-level entry points, without the
console script's last-resort guard, so an exception that the guard would have hidden is seen
here), plus a handful of real subprocess runs.

How much is generated depends on the hypothesis profile (tests/robustness/conftest.py):
``ci`` writes one random variant of each mutation per corpus config, ``long`` twelve.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from advisor.config.loading import MAX_CONFIG_BYTES, MAX_DEPTH, load_config

from robust_helpers import FUZZ_ROUNDS, PROFILE, clean_env, corpus_configs, run_cli

CORPUS_FILES = corpus_configs()

#: Outcome a mutation must have: "ok" = DeepSpeed would load it, so we must too (findings, not
#: an error); "unreadable" = DeepSpeed's loader refuses it, so must we (exit 2, one line);
#: "either" = both are acceptable, but never a crash.
OK, UNREADABLE, EITHER = "ok", "unreadable", "either"


# --- mutation operators ------------------------------------------------------------------------

def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indices) to a value inside ``obj``, containers included."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append(prefix + (i,))
            out.extend(_paths(v, prefix + (i,)))
    return out


def _set(obj: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def _del(obj: Any, path: tuple) -> None:
    for k in path[:-1]:
        obj = obj[k]
    del obj[path[-1]]


def _get(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


WRONG_TYPES: list[Any] = ["x", "", "auto", "3", "true", None, True, False, [], [1, "a"], {}, {"a": {"b": 1}}, 3.5, -7,
                          "none", "nvme", "cpu"]
EDGE_NUMBERS: list[Any] = [0, -1, 1, -(2 ** 63), 2 ** 63, 2 ** 64 + 1, 10 ** 100, -(10 ** 30), 1e308, -1e308, 5e-324,
                           0.5, -0.0, 2 ** 53 + 1, 1e15, 4.9999, 10 ** 4000]


def m_wrong_type(data: dict, rng: random.Random) -> tuple[Any, str]:
    paths = _paths(data)
    for p in rng.sample(paths, min(len(paths), rng.randint(1, 4))):
        try:
            _set(data, p, rng.choice(WRONG_TYPES))
        except (KeyError, IndexError, TypeError):
            pass
    # Whole known sections replaced by the wrong type, too.
    for sec in ("zero_optimization", "fp16", "bf16", "optimizer", "aio", "offload_optimizer"):
        if rng.random() < 0.2:
            data[sec] = rng.choice(WRONG_TYPES)
    return data, OK


def m_remove_keys(data: dict, rng: random.Random) -> tuple[Any, str]:
    paths = [p for p in _paths(data) if not isinstance(p[-1], int)]
    rng.shuffle(paths)
    for p in paths[: rng.randint(1, max(1, len(paths)))]:
        try:
            _del(data, p)
        except (KeyError, IndexError, TypeError):
            pass
    return data, OK


def m_edge_numbers(data: dict, rng: random.Random) -> tuple[Any, str]:
    nums = [p for p in _paths(data) if isinstance(_get(data, p), (int, float)) and not isinstance(_get(data, p), bool)]
    nums += [("zero_optimization", "stage"), ("train_micro_batch_size_per_gpu",), ("gradient_accumulation_steps",)]
    for p in nums:
        if rng.random() < 0.7:
            try:
                _set(data, p, rng.choice(EDGE_NUMBERS[:-1]))
            except (KeyError, IndexError, TypeError):
                pass
    return data, OK


def m_hjson_unquoted_specials(data: dict, rng: random.Random) -> tuple[Any, str]:
    """NaN / Infinity / -Infinity / True as bare literals (json.dumps writes NaN and Infinity;
    HJSON reads an unquoted word up to the end of the line as a string)."""
    nums = [p for p in _paths(data) if isinstance(_get(data, p), (int, float, bool))] or [("train_batch_size",)]
    for p in rng.sample(nums, min(len(nums), rng.randint(1, 5))):
        try:
            _set(data, p, rng.choice([float("nan"), float("inf"), float("-inf")]))
        except (KeyError, IndexError, TypeError):
            pass
    return data, EITHER


def m_deep_nesting_ok(data: dict, rng: random.Random) -> tuple[Any, str]:
    """Nesting at the limit: MAX_DEPTH levels counting the top-level object is still accepted."""
    v: Any = 1
    for _ in range(MAX_DEPTH - 2):
        v = rng.choice([{"k": v}, [v]])
    key = rng.choice(["zero_optimization", "optimizer", "extra", "fp16"])
    data[key] = {"deep": v} if rng.random() < 0.5 else v
    return data, OK


def t_deep_nesting_over(text: str, rng: random.Random) -> tuple[bytes, str]:
    depth = rng.choice([MAX_DEPTH + 1, 1000, 200_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    i = text.rfind("}")
    body = opener * depth + "1" + closer * depth
    return (text[:i] + ', "nest": ' + body + text[i:] if i > 0 else body).encode(), UNREADABLE


def t_float_overflow(text: str, rng: random.Random) -> tuple[bytes, str]:
    i = text.find("{")
    return (text[: i + 1] + f' "train_batch_size": {rng.choice(["1e999", "-1e999", "1e400"])},' + text[i + 1:]).encode(), EITHER


def t_huge_int_literal(text: str, rng: random.Random) -> tuple[bytes, str]:
    """An integer literal longer than Python's int-parsing limit (4300 digits)."""
    i = text.find("{")
    return (text[: i + 1] + f' "train_batch_size": {"9" * rng.choice([4301, 20000])},' + text[i + 1:]).encode(), EITHER


def t_non_utf8(text: str, rng: random.Random) -> tuple[bytes, str]:
    raw = text.encode("utf-8")
    i = rng.randrange(len(raw) + 1)
    bad = rng.choice([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xe9t\xe9", b"\x80", b"\xed\xa0\x80"])
    return raw[:i] + bad + raw[i:], UNREADABLE


def t_latin1(text: str, rng: random.Random) -> tuple[bytes, str]:
    i = text.find("{")
    return (text[: i + 1] + ' "comment": "caf\u00e9 na\u00efve",' + text[i + 1:]).encode("latin-1", "replace"), UNREADABLE


def t_utf16(text: str, rng: random.Random) -> tuple[bytes, str]:
    return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-32"])), UNREADABLE


def t_nul(text: str, rng: random.Random) -> tuple[bytes, str]:
    raw = text.encode()
    i = rng.randrange(len(raw) + 1)
    return raw[:i] + b"\x00" + raw[i:], UNREADABLE


def t_bom(text: str, rng: random.Random) -> tuple[bytes, str]:
    return b"\xef\xbb\xbf" + text.encode(), EITHER


def t_duplicate_key(text: str, rng: random.Random) -> tuple[bytes, str]:
    keys = list(dict.fromkeys(re.findall(r'"([A-Za-z0-9_]+)"\s*:', text)))
    if not keys:
        return b'{"a": 1, "a": 2}', UNREADABLE
    k = rng.choice(keys)
    m = re.search(r'"' + re.escape(k) + r'"\s*:', text)
    assert m
    dup = f'"{k}": 0, ' if rng.random() < 0.5 else f'"{k}": {{"x": 1}}, '
    return (text[: m.start()] + dup + text[m.start():]).encode(), UNREADABLE


def t_truncate(text: str, rng: random.Random) -> tuple[bytes, str]:
    return text[: rng.randrange(max(1, len(text)))].encode(), EITHER


def t_garbage(text: str, rng: random.Random) -> tuple[bytes, str]:
    n = rng.randint(1, 400)
    return bytes(rng.randrange(1, 256) for _ in range(n)), EITHER


def t_top_level(text: str, rng: random.Random) -> tuple[bytes, str]:
    return rng.choice([b"", b"   \n\t", b"[]", b"null", b"42", b'"a string"', b"[{}]", b"true"]), UNREADABLE


def t_comment_only(text: str, rng: random.Random) -> tuple[bytes, str]:
    """HJSON reads a file of comments (or a braceless member list) as an object: DeepSpeed gets {}."""
    return rng.choice([b"// just a comment\n", b"# yaml-ish comment\n", b"/* c */\n", b"a: 1\nb: x\n"]), OK


def t_ascii_controls(text: str, rng: random.Random) -> tuple[bytes, str]:
    """Keys and values with escaped control characters, bidi overrides, emoji and combining marks."""
    i = text.find("{")
    junk = rng.choice(['"\\u0007bell\\u0008"', '"\\u202eevil"', '"\\ud83d\\ude00"', '"e\\u0301"', '"\\t\\r\\n"'])
    return (text[: i + 1] + f" {junk}: {junk}, \"zero_optimization\x20\": 1," + text[i + 1:]).encode(), OK


STRUCT_OPS: dict[str, Callable[[dict, random.Random], tuple[Any, str]]] = {
    "wrong_type": m_wrong_type,
    "remove_keys": m_remove_keys,
    "edge_numbers": m_edge_numbers,
    "nan_inf": m_hjson_unquoted_specials,
    "deep_ok": m_deep_nesting_ok,
}
TEXT_OPS: dict[str, Callable[[str, random.Random], tuple[bytes, str]]] = {
    "deep_over": t_deep_nesting_over,
    "float_overflow": t_float_overflow,
    "huge_int": t_huge_int_literal,
    "non_utf8": t_non_utf8,
    "latin1": t_latin1,
    "utf16": t_utf16,
    "nul": t_nul,
    "bom": t_bom,
    "dup_key": t_duplicate_key,
    "truncate": t_truncate,
    "garbage": t_garbage,
    "top_level": t_top_level,
    "comment_only": t_comment_only,
    "controls": t_ascii_controls,
}


@dataclass
class Mutant:
    path: Path
    op: str
    origin: str
    expect: str


def _dump(obj: Any, rng: random.Random) -> str:
    return json.dumps(obj, indent=rng.choice([None, 2]), allow_nan=True, ensure_ascii=rng.random() < 0.5)


def write_mutants(out: Path, rounds: int = FUZZ_ROUNDS) -> list[Mutant]:
    """Write every mutation of every corpus config into ``out``; return what was written."""
    out.mkdir(parents=True, exist_ok=True)
    mutants: list[Mutant] = []
    n = 0
    for src in CORPUS_FILES:
        text = src.read_text(encoding="utf-8")
        try:
            data = load_config(str(src)).data
        except Exception:  # a corpus file the loader refuses: text-level mutations only
            data = None
        for rnd in range(rounds):
            for op, fn in STRUCT_OPS.items():
                if data is None:
                    continue
                rng = random.Random(f"{src.name}/{op}/{rnd}")
                mutated, expect = fn(json.loads(json.dumps(data)), rng)
                p = out / f"{n:05d}_{op}.json"
                p.write_text(_dump(mutated, rng), encoding="utf-8")
                mutants.append(Mutant(p, op, src.name, expect))
                n += 1
            for op, fn in TEXT_OPS.items():
                rng = random.Random(f"{src.name}/{op}/{rnd}")
                raw, expect = fn(text, rng)
                p = out / f"{n:05d}_{op}{src.suffix if src.suffix in ('.json', '.conf', '.yml') else '.json'}"
                p.write_bytes(raw)
                mutants.append(Mutant(p, op, src.name, expect))
                n += 1
    return mutants


@pytest.fixture(scope="module")
def mutants(tmp_path_factory) -> list[Mutant]:
    return write_mutants(tmp_path_factory.mktemp("mutants"))


def _no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback (most recent call last)" not in t, t[-3000:]
        assert "internal error" not in t, t[-3000:]


# --- lint: one real process over the whole folder ---------------------------------------------

def test_lint_folder_of_mutants_json(mutants):
    folder = mutants[0].path.parent
    t0 = time.monotonic()
    p = run_cli(["lint", "--format", "json", "--fail-on", "error", str(folder)], timeout=600)
    elapsed = time.monotonic() - t0
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode in (0, 1, 2), p.stderr
    doc = json.loads(p.stdout)
    by_file = {Path(f["file"]).name: f for f in doc["files"]}
    assert len(by_file) == len(mutants), "every mutated file gets exactly one result"
    problems = []
    for m in mutants:
        r = by_file[m.path.name]
        err = r.get("error")
        if err is not None:
            if "\n" in err or not err.strip() or not err.startswith(str(m.path)):
                problems.append(f"{m.path.name} ({m.op} of {m.origin}): error is not one line naming the file: {err!r}")
            if r["findings"]:
                problems.append(f"{m.path.name}: both an error and findings")
        if m.expect == OK and err is not None:
            problems.append(f"{m.path.name} ({m.op} of {m.origin}): DeepSpeed loads this, but lint refused it: {err}")
        skipped = r.get("skipped")
        if skipped is not None:
            # a folder lint skips, by name and reason, a file whose top level is not a JSON object
            # or holds no DeepSpeed key (issue 19: an unrelated JSON file must not fail the folder)
            try:
                top = json.loads(m.path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                top = {}
            if (isinstance(top, dict) and "no DeepSpeed key" not in skipped) \
                    or "not a DeepSpeed config" not in skipped or r["findings"]:
                problems.append(f"{m.path.name} ({m.op} of {m.origin}): skipped, but it is a JSON object: {skipped}")
        if m.expect == UNREADABLE and err is None and skipped is None:
            problems.append(f"{m.path.name} ({m.op} of {m.origin}): DeepSpeed refuses this, but lint read it")
        for f in r["findings"]:
            if not f.get("code") or f.get("severity") not in ("error", "warning", "info") or not f.get("message"):
                problems.append(f"{m.path.name}: malformed finding {f}")
    assert not problems, "\n".join(problems[:40])
    any_error = any("error" in f for f in doc["files"])
    any_error_finding = any(x["severity"] == "error" for f in doc["files"] for x in f["findings"])
    assert p.returncode == (2 if any_error else 1 if any_error_finding else 0)
    assert doc["summary"]["files"] == len(mutants)
    assert doc["summary"]["unreadable"] == sum(1 for f in doc["files"] if "error" in f)
    # Bounded: a few hundred files in one process (the ci profile) in well under a minute.
    assert elapsed < 120 * max(1, FUZZ_ROUNDS), f"lint of {len(mutants)} files took {elapsed:.0f} s"


def test_lint_folder_of_mutants_text(mutants):
    """The text renderer over the same folder: same exit code, one line per unreadable file, on
    stderr (an error, not a finding; the tally on stdout counts them)."""
    folder = mutants[0].path.parent
    pj = run_cli(["lint", "--format", "json", "--fail-on", "never", str(folder)], timeout=600)
    p = run_cli(["lint", "--fail-on", "never", str(folder)], env=clean_env(NO_COLOR="1"), timeout=600)
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == pj.returncode
    errors = [f["error"] for f in json.loads(pj.stdout)["files"] if "error" in f]
    lines = set(p.stderr.splitlines())
    missing = [e for e in errors if f"ds-advisor: {e}" not in lines]
    assert not missing, missing[:10]
    assert p.stdout.splitlines()[-1].startswith(f"{len(json.loads(pj.stdout)['files'])} file(s):")


def test_lint_text_lone_surrogate_key(tmp_path):
    cfg = tmp_path / "sur.json"
    cfg.write_text('{"\\ud800x": 1, "train_batch_size": 8}', encoding="ascii")
    assert load_config(str(cfg)).data["\ud800x"] == 1  # readable, as DeepSpeed would read it
    p = run_cli(["lint", str(cfg)], env=clean_env(NO_COLOR="1"))
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode in (0, 1)
    assert "S002" in p.stdout


def test_lint_json_lone_surrogate_key(tmp_path):
    cfg = tmp_path / "sur.json"
    cfg.write_text('{"\\ud800x": 1, "train_batch_size": 8}', encoding="ascii")
    p = run_cli(["lint", "--format", "json", str(cfg)])
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode in (0, 1)
    assert any(f["code"] == "S002" for f in json.loads(p.stdout)["files"][0]["findings"])


# --- estimate and check: in-process through click, every mutant --------------------------------

def _invoke(args: list[str], env: dict[str, str]) -> Any:
    from advisor.cli import main

    runner = CliRunner()
    return runner.invoke(main, args, env=env, catch_exceptions=True)


def _assert_contract(res, label: str) -> None:
    exc = res.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise AssertionError(f"{label}: exception escaped the CLI: {type(exc).__name__}: {exc}\n{tb[-2500:]}")
    out = res.output
    _no_traceback(out)
    assert res.exit_code in (0, 1, 2), f"{label}: exit {res.exit_code}\n{out[-1500:]}"
    if res.exit_code == 2:
        err = (res.stderr or "").strip().splitlines()
        assert len(err) == 1 and err[0].startswith(("ds-advisor: ", "Error: ", "Usage: ")) or \
            (err and err[-1].startswith("Error: ")), f"{label}: exit 2 without a one-line reason: {res.stderr!r}"


def _env_no_probes(tmp: Path) -> dict[str, str]:
    """No launcher variables and a PATH without nvidia-smi/rocm-smi: check depends on flags only."""
    empty = tmp / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: None for k in ("WORLD_SIZE", "SLURM_NTASKS", "LOCAL_WORLD_SIZE", "SLURM_GPUS_ON_NODE",
                             "SLURM_GPUS_PER_NODE", "SLURM_JOB_NUM_NODES", "CUDA_VISIBLE_DEVICES",
                             "ROCR_VISIBLE_DEVICES", "DS_ADVISOR_TEST_DISK_FREE", "DS_ADVISOR_TEST_LIBAIO")}
    env["PATH"] = str(empty)
    env["NO_COLOR"] = "1"
    return env  # type: ignore[return-value]


def _subset(mutants: list[Mutant]) -> list[Mutant]:
    """ci: a deterministic third of the mutants (every op, every corpus config appears); long: all."""
    if PROFILE == "long":
        return mutants
    return [m for i, m in enumerate(mutants) if i % 3 == 0 or m.expect == OK and i % 3 == 1]


#: Crashes already found by this fuzzer, by signature (exception type, advisor file, function),
#: each with the xfail test that reproduces it minimally. The bulk runs below report any *other*
#: crash; once a bug is fixed its xfail test passes (strict: it then fails, asking to remove the
#: entry here).
KNOWN_BUGS: dict[tuple[str, str, str], str] = {}


def _signature(exc: BaseException) -> tuple[str, str, str]:
    import traceback
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}advisor{os.sep}" in f.filename]
    last = frames[-1] if frames else None
    return (type(exc).__name__, os.path.basename(last.filename) if last else "?", last.name if last else "?")


def _run_bulk(cases: list[tuple[Mutant, list[str]]], env: dict[str, str]) -> None:
    problems: list[str] = []
    known: dict[str, int] = {}
    for m, args in cases:
        res = _invoke(args, env)
        label = f"{args[0]} {m.path.name} ({m.op} of {m.origin}; {' '.join(args[2:])})"
        exc = res.exception
        if exc is not None and not isinstance(exc, SystemExit):
            sig = _signature(exc)
            if sig in KNOWN_BUGS:
                known[KNOWN_BUGS[sig]] = known.get(KNOWN_BUGS[sig], 0) + 1
                continue
        try:
            _assert_contract(res, label)
            assert res.exit_code != 3, "without --strict a failed probe is a warning, never exit 3"
            if m.expect == OK:
                assert res.exit_code in (0, 1), f"{label}: readable config refused: {res.output[-500:]}"
            if m.expect == UNREADABLE:
                assert res.exit_code == 2, f"{label}: unreadable config accepted"
            if "json" in args and res.exit_code in (0, 1):
                doc = json.loads(res.stdout)
                for role in doc.get("ranks", []):
                    for item in role["items"]:
                        assert isinstance(item["bytes"], int) and item["bytes"] >= 0, (label, item)
        except AssertionError as e:
            problems.append(str(e)[:3000])
    if known:
        print("known bugs hit (see their xfail tests):", known)
    assert not problems, f"{len(problems)} failure(s); first ones:\n" + "\n\n".join(problems[:5])


def test_estimate_every_mutant_in_process(mutants, tmp_path):
    _run_bulk([(m, ["estimate", str(m.path), "--params", "1000000", "--world-size", "2", "--format", fmt])
               for m in _subset(mutants) for fmt in ("json", "text")], _env_no_probes(tmp_path))


def test_check_every_mutant_in_process(mutants, tmp_path):
    _run_bulk([(m, ["check", str(m.path), "--params", "1000000", "--world-size", "2", "--gpus-per-node", "2",
                    "--allow-tight", "--gpu-memory", "80GB", "--host-memory", "512GB", "--format", fmt])
               for m in _subset(mutants) for fmt in ("json", "text")], _env_no_probes(tmp_path))


@pytest.mark.parametrize("cfg", [{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 0},
                                 {"train_batch_size": 8, "gradient_accumulation_steps": 0}])
@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_bug_zero_micro_batch_or_accumulation(tmp_path, cfg, cmd):
    _repro(tmp_path, cfg, cmd)


@pytest.mark.parametrize("cmd", ["estimate", "check"])
def test_unsupported_combination_is_a_finding(tmp_path, cmd):
    """A combination DeepSpeed refuses at initialize (bf16 + fp32 accumulation at stage 0) is
    reported as a finding (exit 1), not a crash (was 'internal error: ValueError' before 59b1ead)."""
    _repro(tmp_path, {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                      "data_types": {"grad_accum_dtype": "fp32"}}, cmd)


def _repro(tmp_path: Path, cfg: dict, cmd: str) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    args = [cmd, str(f), "--params", "1000000", "--world-size", "2"]
    if cmd == "check":
        args += ["--gpu-memory", "80GB", "--host-memory", "512GB"]
    res = _invoke(args, _env_no_probes(tmp_path))
    _assert_contract(res, " ".join(args))
    p = run_cli(args, env=clean_env(PATH=str(tmp_path)))
    assert "internal error" not in p.stderr, p.stderr


def test_estimate_and_check_refuse_unreadable_mutants_in_process(mutants, tmp_path):
    """Runs even before the ledger lands: unreadable input stops before any estimate."""
    env = _env_no_probes(tmp_path)
    for m in [m for m in mutants if m.expect == UNREADABLE][:: max(1, 3 // FUZZ_ROUNDS)]:
        for cmd in (["estimate", str(m.path), "--params", "1000000", "--world-size", "2"],
                    ["check", str(m.path), "--params", "1000000", "--world-size", "2", "--allow-tight", "--gpu-memory", "80GB",
                     "--host-memory", "512GB"]):
            res = _invoke(cmd, env)
            _assert_contract(res, f"{cmd[0]} {m.path.name} ({m.op})")
            assert res.exit_code == 2, (m.path.name, res.output[-400:])
            assert res.stderr.strip().startswith("ds-advisor: "), res.stderr


# --- a handful of real processes ----------------------------------------------------------------

def test_real_processes_on_a_few_mutants(mutants, tmp_path):
    rng = random.Random(7)
    picks = rng.sample(mutants, 4)
    env = clean_env(PATH=str(tmp_path), NO_COLOR="1")
    for m in picks:
        for args in (["estimate", str(m.path), "--params", "1000000", "--world-size", "2"],
                     ["check", str(m.path), "--params", "1000000", "--world-size", "2", "--allow-tight", "--gpu-memory", "80GB",
                      "--host-memory", "512GB"]):
            p = run_cli(args, env=env)
            _no_traceback(p.stdout, p.stderr)
            assert p.returncode in (0, 1, 2), (args, p.stderr)
            if p.returncode == 2:
                assert len(p.stderr.strip().splitlines()) == 1, p.stderr


# --- numbers at the edges ----------------------------------------------------------------------

EDGE_CONFIGS = {
    "z0_bf16": {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}},
    "z2_fp16": {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}, "zero_optimization": {"stage": 2}},
    "z3_bf16_offload": {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                              "offload_param": {"device": "cpu"}}},
}


@pytest.mark.parametrize("name", sorted(EDGE_CONFIGS))
@pytest.mark.parametrize("params,world", [(1, 1), (1, 65536), (10 ** 13, 1), (10 ** 13, 65536)])
def test_estimate_edges(tmp_path, name, params, world):
    if PROFILE != "long" and world == 65536 and (name, params) not in (("z3_bf16_offload", 10 ** 13), ("z2_fp16", 1)):
        pytest.skip("65536 ranks x every config only in the long profile (about 10 s each)")
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(EDGE_CONFIGS[name]))
    t0 = time.monotonic()
    res = _invoke(["estimate", str(cfg), "--params", str(params), "--world-size", str(world), "--format", "json",
                   "--gpu-memory", "80GB", "--host-memory", "2TB"], _env_no_probes(tmp_path))
    elapsed = time.monotonic() - t0
    _assert_contract(res, f"estimate {name} params={params} world={world}")
    assert res.exit_code in (0, 1)
    assert elapsed < 60, f"{elapsed:.0f} s for {world} ranks"
    doc = json.loads(res.stdout)
    spans = sorted(tuple(rr) for role in doc["ranks"] for rr in role["rank_ranges"])
    assert all(b >= a for a, b in spans) and spans[0][0] == 0, spans[:3]
    assert all(spans[i + 1][0] == spans[i][1] + 1 for i in range(len(spans) - 1)), "roles partition the ranks"
    n = spans[-1][1] + 1
    assert n in (1, world) and sum(role["rank_count"] for role in doc["ranks"]) == n
    assert len(res.stdout) < 5_000_000, f"{len(res.stdout)} bytes of JSON for {world} ranks"
    for role in doc["ranks"]:
        for item in role["items"]:
            assert isinstance(item["bytes"], int) and item["bytes"] >= 0, item
    acc = next(f for f in doc["fit"] if f["tier"] == "accelerator")
    if name == "z0_bf16" and params == 10 ** 13:
        # Stage 0, bf16, Adam: 2 (bf16 params) + 4 (fp32 master) + 8 (moments) bytes per parameter on
        # every rank (reference section 9 cheat-sheet), whatever the world size: 1.4e14 B.
        assert acc["need"] >= 14 * 10 ** 13
        assert res.exit_code == 1 and any(f["code"] == "M100" for f in doc["findings"])
    if params == 1 and name != "z3_bf16_offload":
        # One parameter never needs more than the fixed buffers (<= a few GB of buckets).
        assert acc["need"] < 8 * 10 ** 9


def test_estimate_world_size_above_limit_is_usage_error(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(EDGE_CONFIGS["z2_fp16"]))
    # a whole number in scientific notation is a count (bed320b: --params 20e9), so "1e3" is 1,000
    # ranks; past the limit written that way, or not whole, is still refused
    for ws in ("0", "-1", str((1 << 20) + 1), "2e6", "1.5e0", "two"):
        res = _invoke(["estimate", str(cfg), "--params", "1000", "--world-size", ws], _env_no_probes(tmp_path))
        _assert_contract(res, f"--world-size {ws}")
        assert res.exit_code == 2
    for n in ("0", "-5", "1.5", "1e-3", "nan"):
        res = _invoke(["estimate", str(cfg), "--params", n, "--world-size", "1"], _env_no_probes(tmp_path))
        _assert_contract(res, f"--params {n}")
        assert res.exit_code == 2


# --- resource limits ---------------------------------------------------------------------------

def _oversize(path: Path, extra: int = 1) -> int:
    """A *valid* JSON config just over the limit (a long string value), so only the size refuses it."""
    head, tail = b'{"train_batch_size": 8, "pad": "', b'"}'
    n = MAX_CONFIG_BYTES + extra - len(head) - len(tail)
    with open(path, "wb") as fh:
        fh.write(head)
        fh.write(b"x" * n)
        fh.write(tail)
    return path.stat().st_size


def test_size_limit_refused_with_clear_message(tmp_path):
    big = tmp_path / "big.json"
    size = _oversize(big)
    assert size == MAX_CONFIG_BYTES + 1
    at = tmp_path / "at_limit.json"
    assert _oversize(at, 0) == MAX_CONFIG_BYTES
    p = run_cli(["lint", "--format", "json", str(big), str(at)])
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2
    files = {Path(f["file"]).name: f for f in json.loads(p.stdout)["files"]}
    err = files["big.json"]["error"]
    assert "\n" not in err and str(MAX_CONFIG_BYTES) in err and "limit" in err, err
    assert "error" not in files["at_limit.json"], "a file exactly at the limit is read"
    for cmd in (["estimate", str(big), "--params", "1000"],
                ["check", str(big), "--params", "1000", "--gpu-memory", "80GB", "--host-memory", "1TB"]):
        q = run_cli(cmd, env=clean_env(PATH=str(tmp_path)))
        _no_traceback(q.stdout, q.stderr)
        assert q.returncode == 2
        assert q.stderr.count("\n") == 1 and "limit" in q.stderr and str(MAX_CONFIG_BYTES) in q.stderr, q.stderr


def test_size_limit_on_stdin(tmp_path):
    big = tmp_path / "big.json"
    _oversize(big, 1000)
    p = run_cli(["lint", "-"], stdin=big.read_bytes())
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2
    assert "limit" in p.stdout + p.stderr


def test_huge_file_is_not_read_whole(tmp_path):
    """A sparse 4 GiB file is refused from its size, without reading it into memory."""
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(4 << 30)
    t0 = time.monotonic()

    def limit_memory():  # 1 GiB of address space: reading 4 GiB would fail loudly
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    p = run_cli(["lint", str(huge)], preexec_fn=limit_memory)
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2 and "limit" in p.stderr, p.stdout + p.stderr
    assert time.monotonic() - t0 < 60


# --- nothing fetched, nothing executed ---------------------------------------------------------

AUDIT_RUNNER = textwrap.dedent('''
    import atexit, json, sys
    MARK = "DSADVISORPWNED"
    events = []
    NET = ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
           "socket.gethostbyaddr", "urllib.Request", "http.client.connect", "socket.sendto", "socket.bind")
    RUN = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.startfile", "pty.spawn")
    def hook(ev, args):
        if ev in NET or ev in RUN:
            events.append([ev, repr(args)[:400]])
        elif ev in ("compile", "exec") and args:
            src = args[0]
            if isinstance(src, bytes):
                src = src.decode("latin-1")
            if isinstance(src, str) and (MARK in src or "__import__" in src):
                events.append([ev, src[:400]])
        elif ev == "import" and args and str(args[0]).split(".")[0] in ("evilmod", "evil_optimizer", "pwn"):
            events.append([ev, str(args[0])])
        elif ev == "open" and args and isinstance(args[0], str) and args[0].endswith(("evilmod.py", "pwn.py")):
            events.append([ev, args[0]])
    out = sys.argv[1]
    atexit.register(lambda: open(out, "w").write(json.dumps(events)))
    sys.addaudithook(hook)
    sys.argv = ["ds-advisor"] + sys.argv[2:]
    from advisor.cli import run
    run()
''')


def _hostile_config(tmp: Path) -> dict:
    mark = tmp / "MARKER"
    cmd = f"touch {mark}"
    (tmp / "evilmod.py").write_text(f"import os\nos.system({cmd!r})\n")
    (tmp / "pwn.py").write_text(f"import os\nos.system({cmd!r})\n")
    sh = tmp / "evil.sh"
    sh.write_text(f"#!/bin/sh\n{cmd}\n")
    sh.chmod(0o755)
    code = f"__import__('os').system('{cmd}') # DSADVISORPWNED"
    return {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "evilmod.Evil", "params": {"lr": code, "betas": [code, 0.9]}},
        "scheduler": {"type": "pwn", "params": {"warmup": code}},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "nvme", "nvme_path": str(sh)},
            "offload_param": {"device": "nvme", "nvme_path": "http://127.0.0.1:9/nvme"},
            "reduce_bucket_size": code,
            "stage3_prefetch_bucket_size": "$(touch " + str(mark) + ")",
        },
        "tensorboard": {"enabled": True, "output_path": "https://example.invalid/tb", "job_name": "`" + cmd + "`"},
        "wandb": {"enabled": True, "project": code},
        "checkpoint": {"writer": {"type": str(tmp / "pwn.py")}},
        "$schema": "https://example.invalid/schema.json",
        "$ref": "https://example.invalid/ref.json#/x",
        "data_types": {"grad_accum_dtype": "torch.float32; " + code},
        "model": str(tmp / "pwn.py"),
        "hf_model": "https://huggingface.co/openai-community/gpt2/resolve/main/config.json",
    }


@pytest.mark.parametrize("command", ["lint", "lint-hf", "estimate", "check", "resolve"])
def test_config_values_are_data(tmp_path, command):
    """Strings that look like code, shell, module names, URLs or a path to a python file are
    only ever data: no network call, no process started, nothing compiled, imported or run."""
    cfg = tmp_path / "hostile.json"
    cfg.write_text(json.dumps(_hostile_config(tmp_path)))
    runner = tmp_path / "audit_runner.py"
    runner.write_text(AUDIT_RUNNER)
    events_file = tmp_path / "events.json"
    args = {
        "lint": ["lint", str(cfg), "--params", "1000000", "--world-size", "2"],
        "lint-hf": ["lint", "--hf", str(cfg), "--model", "llama-3.2-1b"],
        "estimate": ["estimate", str(cfg), "--params", "1000000", "--world-size", "2", "--explain"],
        "check": ["check", str(cfg), "--params", "1000000", "--world-size", "2", "--gpu-memory", "80GB",
                  "--host-memory", "512GB"],
        "resolve": ["resolve", "--hf", str(cfg)],
    }[command]
    env = clean_env(PATH=str(tmp_path / "nobin"), PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                    NO_COLOR="1", HF_HUB_OFFLINE="1")
    import subprocess
    p = subprocess.run([sys.executable, str(runner), str(events_file), *args], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=180)
    out = p.stdout + p.stderr
    assert not (tmp_path / "MARKER").exists(), "a config value was executed"
    events = json.loads(events_file.read_text())
    assert events == [], events
    assert "Traceback (most recent call last)" not in out, out[-3000:]
    assert p.returncode in (0, 1), out[-2000:]


def test_model_argument_is_never_fetched(tmp_path):
    """--model with a hub id or a URL is resolved locally (preset, folder, file) or refused in one
    line; it is never downloaded."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(EDGE_CONFIGS["z2_fp16"]))
    runner = tmp_path / "audit_runner.py"
    runner.write_text(AUDIT_RUNNER)
    import subprocess
    for model in ("openai-community/gpt2", "https://huggingface.co/gpt2/resolve/main/config.json",
                  "hf://meta-llama/Llama-2-7b"):
        ev = tmp_path / "ev.json"
        p = subprocess.run([sys.executable, str(runner), str(ev), "lint", str(cfg), "--model", model],
                           env=clean_env(PATH=str(tmp_path / "nobin")), cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert json.loads(ev.read_text()) == [], (model, ev.read_text())
        assert "Traceback" not in p.stderr
        # Resolved locally (a preset of that name) or refused in one line: either way, offline.
        assert p.returncode in (0, 1) or p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (model, p.stderr)


# --- output files: generate and report ---------------------------------------------------------

def _file_command_args(cmd: str, tmp: Path) -> list[str]:
    if cmd == "generate":
        return ["generate", "--model", "llama-3.2-1b", "--hardware", "dgx-h100", "--nodes", "1", "--gpus-per-node", "8",
                "--global-batch", "64", "--seq-len", "2048"]
    cfg = tmp / "cfg.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 2}}))
    return ["report", str(cfg), "--model", "llama-3.2-1b", "--world-size", "8"]


def _require(cmd: str) -> None:
    from advisor.cli import main
    opts = {o for p in main.commands[cmd].params for o in getattr(p, "opts", [])}
    needed = {"--output", "--force"}
    missing = needed - opts
    assert not missing, f"`ds-advisor {cmd}` lacks {sorted(missing)}, which its issue specifies"


def _dir_listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.mark.parametrize("cmd", ["generate", "report"])
def test_output_never_overwritten_without_force(tmp_path, cmd):
    _require(cmd)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / ("ds_config.json" if cmd == "generate" else "report.html")
    target.write_text("SENTINEL: the user's own file\n")
    base = _file_command_args(cmd, tmp_path)
    p = run_cli([*base, "--output", str(target)], env=clean_env(PATH=str(tmp_path / "nobin")))
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "--force" in p.stderr, p.stderr
    assert target.read_text() == "SENTINEL: the user's own file\n"
    assert _dir_listing(out_dir) == [target.name], "no temporary file left behind"
    q = run_cli([*base, "--output", str(target), "--force"], env=clean_env(PATH=str(tmp_path / "nobin")))
    _no_traceback(q.stdout, q.stderr)
    assert q.returncode in (0, 1), q.stderr
    if q.returncode == 0:
        body = target.read_text()
        assert "SENTINEL" not in body
        if cmd == "generate":
            json.loads(body)
        else:
            assert body.rstrip().endswith("</html>")
    # generate -o X also writes its documented workload sidecar X.workload.json (README, "generate");
    # anything else in the folder is a leftover temporary file
    written = [target.name] + (["ds_config.workload.json"] if cmd == "generate" and q.returncode == 0 else [])
    assert _dir_listing(out_dir) == sorted(written), "no temporary file left behind"


def test_generate_sidecar_never_overwritten_without_force(tmp_path):
    """The sidecar generate writes beside -o obeys the same rule as -o: a file of the user's
    at CONFIG.workload.json is refused without --force (before any work) and left intact."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    side = out_dir / "ds_config.workload.json"
    side.write_text("SENTINEL\n")
    base = _file_command_args("generate", tmp_path)
    p = run_cli([*base, "--output", str(out_dir / "ds_config.json")], env=clean_env(PATH=str(tmp_path / "nobin")))
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--force" in p.stderr, p.stderr
    assert side.read_text() == "SENTINEL\n" and _dir_listing(out_dir) == [side.name]


@pytest.mark.parametrize("cmd", ["generate", "report"])
def test_output_never_partial_when_the_write_fails(tmp_path, cmd):
    """The write fails half-way (RLIMIT_FSIZE: the file system refuses bytes past 200): the old
    file is intact with --force, a new target is not created, and no temporary file remains."""
    _require(cmd)
    base = _file_command_args(cmd, tmp_path)

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    for existing in (True, False):
        out_dir = tmp_path / f"out{int(existing)}"
        out_dir.mkdir()
        target = out_dir / ("ds_config.json" if cmd == "generate" else "report.html")
        if existing:
            target.write_text("OLD\n")
        p = run_cli([*base, "--output", str(target), "--force"], env=clean_env(PATH=str(tmp_path / "nobin")),
                    preexec_fn=small_files)
        _no_traceback(p.stdout, p.stderr)
        assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        if existing:
            assert target.read_text() == "OLD\n", "the old file was damaged"
            assert _dir_listing(out_dir) == [target.name]
        else:
            assert _dir_listing(out_dir) == [], "a partial file was left behind"


@pytest.mark.parametrize("cmd", ["generate", "report"])
def test_output_into_missing_folder(tmp_path, cmd):
    _require(cmd)
    target = tmp_path / "no" / "such" / "dir" / "out.json"
    p = run_cli([*_file_command_args(cmd, tmp_path), "--output", str(target)],
                env=clean_env(PATH=str(tmp_path / "nobin")))
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "no").exists()
