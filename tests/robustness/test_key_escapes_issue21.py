"""Issue 21: a control character in a config key is shown the same way by every command in every
format (README "Outputs": ``\\xNN``), never sent raw to the terminal and never dropped.

Before: ``check`` and ``checkpoint`` text printed the raw BEL, ``estimate`` text dropped it (rich
strips control codes) and named the key 'ab', an ANSI escape was stripped by check/checkpoint;
only ``lint`` showed ``a\\x07b``. Text, GitHub annotations and HTML show ``\\xNN``
(advisor.render.escape.safe_text); JSON and SARIF carry the key exactly, as the JSON encoder's
``\\u00NN`` escape (never a raw control byte), so a finding's pointer still resolves in the file.
"""

from __future__ import annotations

import json

import pytest

from tests.robustness.robust_helpers import run_cli

BEL, ESC = "a\u0007b", "c\u001b[31md"
MARKUP = "[bold]k"  # rich markup would eat it in a console.print with markup on
KEYS = (BEL, ESC, MARKUP)
RAW = [chr(c) for c in list(range(32)) + [127] if c not in (9, 10)]


def _shown(key: str) -> str:
    """The key as README promises text shows it: each control character as backslash x NN."""
    return "".join(f"\\x{ord(c):02x}" if c in RAW else c for c in key)


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    f = d / "bel.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                             "zero_optimization": {"stage": 2, **{k: 1 for k in KEYS}}}))
    return f


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


def _check_no_raw(text: str, where: str, colour: bool = False) -> None:
    for c in RAW:
        if c == "\u001b" and colour:
            # the report's own colour codes are ESC sequences; the key's must not be one
            assert ESC not in text, (where, "the key's ANSI escape went out raw")
            continue
        assert c not in text, (where, f"raw control character {ord(c):#04x}", text[:2000])


@pytest.mark.parametrize("command", ["lint", "check", "estimate", "checkpoint"])
@pytest.mark.parametrize("fmt", ["text", "text-colour", "json", "sarif", "github"])
def test_control_characters_in_keys_every_command_and_format(cfg, command, fmt):
    colour = fmt == "text-colour"
    args = [command, str(cfg), "--format", fmt.split("-")[0]]
    if command != "lint":
        args += ["--model", "llama-3-8b"]
    if fmt.startswith("text"):
        args += ["--color", "always" if colour else "never"]
    p = run_cli(args, timeout=300)
    where = f"{command} --format {fmt}"
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, (where, p.returncode, p.stderr[-1500:])
    _check_no_raw(p.stdout, where, colour)
    _check_no_raw(p.stderr, where + " (stderr)")
    if fmt in ("json", "sarif"):
        strings = list(_strings(json.loads(p.stdout)))
        for key in KEYS:  # the key itself, exactly, in some message or pointer
            assert any(key in s for s in strings), (where, key)
        return
    for key in KEYS:  # shown escaped, not dropped ('ab', 'cd') nor eaten as markup ('k')
        assert f"'{_shown(key)}'" in p.stdout, (where, _shown(key), p.stdout[-3000:])
    for dropped in ("'ab'", "'cd'", "'c[31md'", "'k'"):
        assert dropped not in p.stdout, (where, dropped)


def test_control_characters_in_keys_html_report(cfg, tmp_path):
    out = tmp_path / "r.html"
    p = run_cli(["report", str(cfg), "--model", "llama-3-8b", "-o", str(out)], timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    page = out.read_text(encoding="utf-8")
    _check_no_raw(page, "report html")
    for key in (BEL, ESC):
        assert _shown(key) in page, key
