"""The tensor and layer limits (``MAX_TENSORS``, ``MAX_LAYERS``, ``MAX_GENERATE_TENSORS``) are defined once, in
``advisor.config.validation``, and every message or documented figure naming one is written from the constant:
a patched constant changes the message (a hard-coded "500,000" would not), and README / ARCHITECTURE state the
constants' values where they name them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.config import validation
from advisor.errors import ModelSpecError

ROOT = Path(__file__).resolve().parents[1]


def test_the_limits_live_in_validation_and_are_imported_not_copied():
    from advisor.model import inventory, specs
    assert inventory.MAX_TENSORS is validation.MAX_TENSORS
    assert specs.MAX_LAYERS is validation.MAX_LAYERS
    for rel in ("advisor/model/inventory.py", "advisor/model/specs.py"):
        src = (ROOT / rel).read_text()
        assert not re.search(r"^MAX_(TENSORS|LAYERS)\s*=", src, re.M), rel  # no second definition


def test_generates_refusal_is_written_from_the_constants(monkeypatch):
    """Patched to odd values, each limit appears in the message as the patched value, with thousands
    separators (the message said "500,000 tensors and 100,000 layers" as literals before)."""
    monkeypatch.setattr(validation, "MAX_GENERATE_TENSORS", 1_234)
    monkeypatch.setattr(validation, "MAX_TENSORS", 7_654_321)
    monkeypatch.setattr(validation, "MAX_LAYERS", 43_210)
    assert validation.generate_tensors_problem(1_234, "m") is None
    msg = validation.generate_tensors_problem(1_235, "m")
    assert "1,235 parameter tensors" in msg and "limit of 1,234" in msg
    assert "7,654,321 tensors" in msg and "43,210 layers" in msg
    assert "500,000" not in msg and "100,000" not in msg


def test_the_inventory_over_limit_refusal_is_written_from_the_constant(monkeypatch, tmp_path):
    from advisor.model import inventory
    monkeypatch.setattr(inventory, "MAX_TENSORS", 1_234)
    with pytest.raises(ModelSpecError) as e:
        inventory.from_dict({"tensors": [{"shape": [1]}] * 1_235}, "f.json")
    assert "1,235" in str(e.value) and "1,234" in str(e.value) and "500,000" not in str(e.value)
    big = tmp_path / "big.json"  # the counting pass before the parse says it the same way
    big.write_text(json.dumps({"tensors": [{"shape": [1]}] * 1_235}))
    with pytest.raises(ModelSpecError) as counted:
        inventory.load_inventory(str(big))
    assert str(counted.value) == str(e.value).replace("f.json", str(big))


def test_the_workload_layer_count_refusal_is_written_from_the_constant():
    from advisor.views import workload
    assert workload.MAX_TENSORS is validation.MAX_TENSORS
    src = (ROOT / "advisor/views/workload.py").read_text()
    assert "500,000" not in src and "500_000" not in src


def _flat(rel: str) -> str:
    return " ".join((ROOT / rel).read_text().split())


def test_readme_and_architecture_state_the_constants_values():
    """Where the documents name a limit, the figure next to the name is the constant's (formatted as code
    prints it): changing a limit without its documentation fails here."""
    readme, arch = _flat("README.md"), _flat("ARCHITECTURE.md")
    T, L, G = validation.MAX_TENSORS, validation.MAX_LAYERS, validation.MAX_GENERATE_TENSORS
    assert f"at most {L:,} layers (`MAX_LAYERS`)" in readme
    assert f"an inventory file of at most {T:,} tensors (`MAX_TENSORS`" in readme
    assert f"a model of at most {G:,} parameter tensors (`MAX_GENERATE_TENSORS`" in readme
    assert f"a checkpointed-layer count {T:,}, `MAX_TENSORS`" in readme
    assert f"with {T:,} (`MAX_TENSORS`) or more commas" in readme
    assert f"(`config/validation.MAX_GENERATE_TENSORS`, {G:,};" in arch
    # and no other figure is put beside a limit's name
    for doc in (readme, arch):
        for name, value in (("MAX_TENSORS", T), ("MAX_LAYERS", L), ("MAX_GENERATE_TENSORS", G)):
            for m in re.finditer(r"([\d,]{5,})[^\d`]{0,30}`(?:config/validation\.)?" + name + "`", doc):
                assert m.group(1).rstrip(",") == f"{value:,}", (name, doc[m.start():m.end()])
