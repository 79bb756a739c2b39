"""Issue 21 leftover: an inventory whose ``tensors`` list begins with an object and goes on with
millions of entries that are not objects (``[{"name": "a", "shape": [1]}, [], [], ...]``, 22M
``[]`` in 64 MiB; a string mid-list) passed the check of its first entry and was parsed whole:
``estimate`` took 3.0 s CPU and 1.66 GB before refusing it (over the tensor limit, not at the bad
entry). Now ``readers.first_non_object_at`` finds the first entry that is not an object without
parsing the list, and the CLI refuses the file with the one line ``from_dict`` gives that entry
(``FILE: /tensors/1: expected an object (one tensor ...), got an array``), exit 2.

The scan is checked against ``json.loads`` on random documents in test_inventory_entries_early.py;
here the CLI's line and its peak RSS are checked. The child reports its own peak RSS as its address
space's VmHWM (/proc/self/status), not ``ru_maxrss``: Linux carries the pre-exec address space's
high-water mark into ru_maxrss across exec, and subprocess's vfork shares the parent's, so in the
whole suite the child read the pytest process's ~450 MB."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.config import readers
from advisor.errors import ModelSpecError
from advisor.model import inventory, specs
from tests.robustness.robust_helpers import ROOT, clean_env

#: ``python -m advisor ARGS`` printing its own peak RSS (KiB, VmHWM) on stderr at exit (benchmarks/bounds.py's CHILD).
CHILD = ("import atexit, resource, runpy, sys\n"
         "def _hwm():\n"
         "    try:\n"
         "        return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
         "    except (OSError, StopIteration):\n"
         "        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
         "atexit.register(lambda: print('MAXRSS', _hwm(), file=sys.stderr))\n"
         "sys.argv = ['ds-advisor'] + sys.argv[1:]\n"
         "runpy.run_module('advisor', run_name='__main__')\n")
CONFIG = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}


def _write(path, head: list[str], filler: str) -> None:
    """``{"tensors": [HEAD..., FILLER, FILLER, ...]}`` as large as a model file may be, written piece by piece."""
    start = '{"tensors": [' + ", ".join(head)
    n = (readers.MAX_MODEL_BYTES - len(start) - 2) // (len(filler) + 1)
    with path.open("w") as out:
        out.write(start)
        chunk = ("," + filler) * 100_000
        for _ in range(n // 100_000):
            out.write(chunk)
        out.write(("," + filler) * (n % 100_000) + "]}")
    assert path.stat().st_size <= readers.MAX_MODEL_BYTES


def _estimate(tmp_path, model) -> tuple[int, str, float]:
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CONFIG))
    p = subprocess.run([sys.executable, "-c", CHILD, "estimate", "--model", str(model), "--world-size", "2", str(cfg)],
                       capture_output=True, text=True, cwd=ROOT, env=clean_env(PYTHONPATH=str(ROOT)), timeout=600)
    rss = [int(x.split()[1]) * 1024 for x in p.stderr.splitlines() if x.startswith("MAXRSS ")]
    lines = [x for x in p.stderr.splitlines() if not x.startswith("MAXRSS ")]
    return p.returncode, "\n".join(lines), rss[-1]


FLAT = '{"name": "a", "shape": [1]}'
NESTED = '{"name": "a", "shape": [1], "meta": {"x": [[1]]}}'  # an object inside: the scan's slower reading


MUST = 'expected an object (one tensor, e.g. {"name": "w", "shape": [64, 64]}), got '


@pytest.mark.parametrize("head, filler, index, kind, rss_bound", [
    ([FLAT], "[]", 1, "an array", 4 * readers.MAX_MODEL_BYTES),                 # 22M empty lists after one tensor
    ([FLAT] * 5 + ['"w"'], "5", 5, "a string", 4 * readers.MAX_MODEL_BYTES),    # a string mid-list, 33M ints after it
    ([NESTED], "[]", 1, "an array", 12 * readers.MAX_MODEL_BYTES),              # the parse it replaced took 26x (1.66 GB)
])
def test_a_later_non_object_entry_is_refused_without_the_parse(tmp_path, head, filler, index, kind, rss_bound):
    f = tmp_path / "inv.json"
    _write(f, head, filler)
    rc, err, rss = _estimate(tmp_path, f)
    assert rc == 2, err[-2000:]
    assert err.strip() == f"ds-advisor: {f}: /tensors/{index}: {MUST}{kind}", err[-2000:]
    assert rss < rss_bound, (rss, rss_bound)


@pytest.mark.parametrize("entries, index, kind", [
    ([FLAT, "[64, 64]"] + [FLAT] * 9, 1, "an array"),
    ([NESTED] * 3 + ['"w"'] + [FLAT] * 8, 3, "a string"),
    ([FLAT] * 9 + ["null", FLAT], 9, "null"),
    ([FLAT, NESTED, FLAT, "0.5"] + [NESTED] * 8, 3, "a number"),
])
def test_the_first_bad_entry_is_named_as_from_dict_names_it(tmp_path, monkeypatch, entries, index, kind):
    """At a limit of 10 tensors (so the scan runs on a small file): the message is the one the
    parsed inventory gets from from_dict, and nothing is parsed first."""
    monkeypatch.setattr(inventory, "MAX_TENSORS", 10)
    f = tmp_path / "inv.json"
    f.write_text('{"name": "x", "tensors": [' + ", ".join(entries) + "]}")
    with pytest.raises(ModelSpecError) as parsed:
        inventory.from_dict({"tensors": json.loads(f.read_text())["tensors"][:10]}, str(f))
    assert str(parsed.value) == f"{f}: /tensors/{index}: {MUST}{kind}"

    def no_parse(*a, **k):
        raise AssertionError("parsed before its entries were checked")

    monkeypatch.setattr(readers, "parse_json", no_parse)
    for load in (specs.resolve_model, inventory.load_inventory):
        with pytest.raises(ModelSpecError) as early:
            load(str(f))
        assert str(early.value) == str(parsed.value)
