"""Issue 15: the estimate JSON schema requires what estimate always emits: per role ``phases``,
``peak`` (each tier's ``instant``, ``label``, ``top``), ``timeline``, ``activations``, and the
top-level ``load`` whenever ranks are estimated (a refused config has ``ranks: []`` and no
``load``: views/estimate.py EstimateResult.to_dict). A document without one of them must fail
validation; the documents themselves come from real estimate runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.conftest import run_json

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).parents[1]


def _validator():
    from referencing import Registry, Resource
    schemas = {n: json.loads((ROOT / "schemas" / f"{n}-output.schema.json").read_text()) for n in ("lint", "estimate")}
    for s in schemas.values():
        jsonschema.Draft202012Validator.check_schema(s)
    reg = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in schemas.values()])
    return jsonschema.Draft202012Validator(schemas["estimate"], registry=reg)


VALIDATOR = _validator()

BASE = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
VARIANTS = {
    "z2": ({**BASE, "zero_optimization": {"stage": 2}}, ["--params", "1000000", "--world-size", "2"]),
    "z3_offload": ({**BASE, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                  "offload_param": {"device": "cpu"}}},
                   ["--params", "1000000", "--world-size", "4"]),
    "z1_hf": ({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
               "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "zero_optimization": {"stage": 1}},
              ["--model", "gpt2", "--world-size", "2", "--hf", "--seq-len", "128"]),
    "refused": ({**BASE, "zero_optimization": {"stage": 7}}, ["--params", "1000000"]),
}


def _valid(doc) -> bool:
    return VALIDATOR.is_valid(doc)


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("est")
    for name, (cfg, args) in VARIANTS.items():
        p = d / f"{name}.json"
        p.write_text(json.dumps(cfg))
        _, out[name] = run_json(["estimate", str(p), "--format", "json", *args])
    return out


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_estimate_variant_validates(docs, name):
    doc = docs[name]
    assert _valid(doc), name
    if name == "refused":
        assert doc["ranks"] == [] and "load" not in doc
    else:
        assert doc["ranks"] and "load" in doc


def _deletions(doc):
    """(what, document without it) for every required-by-issue-15 field of ``doc``."""
    out = [("load", lambda d: d.pop("load"))]
    for i, role in enumerate(doc["ranks"]):
        for key in ("timeline", "peak", "phases", "activations"):
            out.append((f"ranks[{i}].{key}", lambda d, i=i, key=key: d["ranks"][i].pop(key)))
        for tier in role["peak"]:
            for key in ("instant", "label", "top"):
                out.append((f"ranks[{i}].peak.{tier}.{key}",
                            lambda d, i=i, tier=tier, key=key: d["ranks"][i]["peak"][tier].pop(key)))
    return out


@pytest.mark.parametrize("name", ["z2", "z3_offload", "z1_hf"])
def test_deleting_a_field_estimate_always_emits_fails_validation(docs, name):
    doc = docs[name]
    dels = _deletions(doc)
    assert len(dels) > 10
    passed = []
    for what, drop in dels:
        d = copy.deepcopy(doc)
        drop(d)
        if _valid(d):
            passed.append(what)
    assert not passed, f"{name}: validates without {passed}"


def test_a_refused_config_needs_no_load_but_an_estimate_does(docs):
    # the conditional: ranks: [] (refused) without load is valid; one role without load is not
    refused = docs["refused"]
    assert _valid(refused)
    d = copy.deepcopy(docs["z2"])
    d.pop("load")
    assert not _valid(d)
    d["ranks"] = []
    assert _valid(d)
