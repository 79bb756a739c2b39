"""Inventory.memo never returns a value derived from a tensor list that has since changed
(issue 21: the memo is keyed by the list's identity and change count, not by comparing a copy).

Each expected value is recomputed by hand from the tensors listed at the time of the call."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.model.inventory import Inventory, TensorList, TensorSpec


def _t(name: str, n: int, trainable: bool = True, group: int = 0) -> TensorSpec:
    return TensorSpec(name, (n,), trainable, group)


MUTATIONS = {
    "append": lambda ts: ts.append(_t("x", 7)),
    "extend": lambda ts: ts.extend([_t("x", 7), _t("y", 11)]),
    "insert": lambda ts: ts.insert(0, _t("x", 7)),
    "pop": lambda ts: ts.pop(),
    "pop0": lambda ts: ts.pop(0),
    "remove": lambda ts: ts.remove(ts[1]),
    "clear": lambda ts: ts.clear(),
    "setitem": lambda ts: ts.__setitem__(0, _t("a", 1000)),
    "setslice": lambda ts: ts.__setitem__(slice(None), [_t("z", 5)]),
    "delitem": lambda ts: ts.__delitem__(0),
    "delslice": lambda ts: ts.__delitem__(slice(0, 2)),
    "iadd": lambda ts: ts.__iadd__([_t("x", 7)]),
    "imul": lambda ts: ts.__imul__(2),
    "sort": lambda ts: ts.sort(key=lambda t: t.numel),
    "reverse": lambda ts: ts.reverse(),
}


@pytest.mark.parametrize("how", sorted(MUTATIONS))
def test_mutated_inventory_never_returns_a_stale_memo(how):
    inv = Inventory("m", [_t("a", 3), _t("b", 5, trainable=False), _t("c", 2, group=1)])
    assert isinstance(inv.tensors, TensorList)
    first = [t.name for t in inv.tensors]
    assert inv.memo(("names",), lambda: [t.name for t in inv.tensors]) == first
    assert inv.numel == 10 and inv.trainable_numel == 5
    MUTATIONS[how](inv.tensors)
    now = list(inv.tensors)
    assert inv.memo(("names",), lambda: [t.name for t in inv.tensors]) == [t.name for t in now]
    assert inv.numel == sum(t.numel for t in now)
    assert inv.trainable_numel == sum(t.numel for t in now if t.trainable)
    assert [[t.name for t in g] for g in inv.groups()] == [
        [t.name for t in now if t.trainable and t.group == k]
        for k in sorted({t.group for t in now if t.trainable})]


def test_assigned_list_is_tracked_and_recomputed():
    """``inv.tensors = [...]`` and dataclasses.replace give a TensorList; the memo sees the new list
    even when it has the same length and version as the old one."""
    inv = Inventory("m", [_t("a", 3)])
    assert inv.numel == 3
    inv.tensors = [_t("b", 4)]
    assert isinstance(inv.tensors, TensorList) and inv.numel == 4
    inv.tensors += [_t("c", 6)]
    assert isinstance(inv.tensors, TensorList) and inv.numel == 10
    r = replace(inv, tensors=[_t("d", 9)])
    assert isinstance(r.tensors, TensorList) and r.numel == 9 and inv.numel == 10


def test_unchanged_list_computes_once():
    inv = Inventory("m", [_t("a", 3)])
    calls = []
    for _ in range(3):
        inv.memo(("k",), lambda: calls.append(1) or len(calls))
    assert calls == [1]
    inv.tensors.append(_t("b", 1))
    inv.memo(("k",), lambda: calls.append(1) or len(calls))
    assert calls == [1, 1]
