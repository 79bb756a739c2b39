"""Model tensor inventory: every parameter tensor, in ``model.parameters()`` order.

The ledger works from this list, not from a parameter count, because DeepSpeed's partitioning
is per tensor (ZeRO-3 pads each parameter to a multiple of the world size; ZeRO-1/2 flatten
each optimizer param group and a tensor straddling two ranks' slices belongs to both).

Sources of an inventory:
* a model preset or a Hugging Face ``config.json`` (``advisor.model.specs``);
* ``--params N``: one param group of synthetic tensors of at most PARAM_CHUNK elements
  (:func:`from_param_count`), the size of a 4096 x 4096 projection. A bare count cannot know
  where tensor boundaries fall; this split gives what a transformer of that size gets (ZeRO-1/2
  keep the gradients of each tensor touching a rank's slice, so one giant tensor would mean
  every rank keeps all gradients; ZeRO-3 sub-groups and NVMe buffers are sized by tensors);
* an inventory JSON file (``schemas/inventory.schema.json``), e.g. exported from a live model
  with :func:`from_module` (the only function here that touches torch, imported lazily).
"""

from __future__ import annotations

import functools
import gc
import itertools
import math
import operator
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from advisor.config.dtypes import TORCH_DTYPE_BYTES, TRAINING_DTYPE_ALIASES, dtype_problem
from advisor.config.validation import MAX_TENSORS, json_kind, json_quoted, json_shown  # MAX_TENSORS: the limit, and why, is there

#: Largest tensor an inventory may list (elements): 2^48, far above any real parameter.
MAX_TENSOR_NUMEL = 1 << 48
from advisor.errors import ModelSpecError


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One parameter tensor.

    ``group`` is the optimizer param group index (ZeRO pads each group separately; HF Trainer
    uses two: with and without weight decay). ``dtype`` is the tensor's dtype *before*
    DeepSpeed casts it (DeepSpeed casts every floating parameter to the training dtype).
    ``numel`` is the product of the shape in elements, computed once at construction (the ledger
    asks for it often). Slots, no per-instance dict: a 1e5-layer model is 9e5 of these, and
    generate holds several sharded copies (issue 21).
    """

    name: str
    shape: tuple[int, ...]
    trainable: bool = True
    group: int = 0
    dtype: str | None = None
    numel: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "numel", math.prod(self.shape) if self.shape else 1)


_FIELDS = operator.attrgetter("name", "shape", "trainable", "group", "dtype")


class LayerTensorSpec(TensorSpec):
    """A TensorSpec of one of many identical layers (``model.specs._repeat_layers``) whose name is
    its layer's ``prefix`` + the layer's ``suffix``, joined when read: the two strings are shared
    (one prefix per layer, one suffix per tensor of the layer), not one name string per tensor
    (9e5 names, ~78 MB of a 1e5-layer estimate's peak, issue 21). Equal to, and hashed as, the
    TensorSpec of the same fields; ``dataclasses.replace`` gives a plain one (its name assigned
    whole). The prefix is held in TensorSpec's own ``name`` slot, which the ``name`` property
    shadows here (one slot more per tensor, not two)."""

    __slots__ = ("suffix",)
    prefix = TensorSpec.__dict__["name"]  # TensorSpec's name slot, read and set under this name

    @property  # type: ignore[override]
    def name(self) -> str:  # noqa: D102 - the class docstring says it
        return self.prefix + self.suffix

    @name.setter
    def name(self, value: str) -> None:  # dataclass __init__ (replace) assigns the whole name
        object.__setattr__(self, "prefix", value)
        object.__setattr__(self, "suffix", "")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorSpec):
            return NotImplemented
        return _FIELDS(self) == _FIELDS(other)

    def __hash__(self) -> int:  # the dataclass's frozen hash: of the compared fields' tuple
        return hash(_FIELDS(self))

    def __repr__(self) -> str:  # as the TensorSpec it stands for (a repr can reach a message)
        return repr(TensorSpec(*_FIELDS(self)))


@dataclass(frozen=True, slots=True)
class ModuleSpec:
    """A module that owns no parameter and that the tensor names cannot spell (issue 15), for
    ZeRO-3's fetch replay (``advisor.ledger.state.zero3_container_steps``): DeepSpeed hooks every
    submodule (``runtime/zero/parameter_offload.py`` _register_deepspeed_module l. 337-528), and with a
    complete trace each hook prefetches (``partitioned_param_coordinator.py`` fetch_sub_module l. 452-485).

    * a parameterless leaf (``sequential`` false: HF Llama's ``rotary_emb``, ``mlp.act_fn``, GPT-2's
      dropouts): called in forward right before the owning module ``before`` (:func:`module_of` of a
      tensor name; None: after the last one); ``backward`` false when its output needs no gradient (a
      rotary embedding's cos/sin), so its pre-backward hook never fires;
    * an ``nn.Sequential`` (``sequential`` true): a container whose items are numbered, as an
      ``nn.ModuleList``'s, but which is called, so its hooks run (a ModuleList's never do)."""

    name: str
    sequential: bool = False
    before: str | None = None
    backward: bool = True

    def to_dict(self) -> dict[str, Any]:
        if self.sequential:
            return {"name": self.name, "sequential": True}
        return {"name": self.name, "before": self.before, **({} if self.backward else {"backward": False})}


def module_of(name: str) -> str:
    """The module a parameter belongs to, i.e. the unit ZeRO-3 fetches together: its name
    without the last dotted component (``model.layers.0.mlp.up_proj.weight`` ->
    ``model.layers.0.mlp.up_proj``). A numeric last component (the synthetic ``params.3``
    tensors of ``--params N``) names a tensor of its own, not one shared module."""
    head, dot, last = name.rpartition(".")
    return head if dot and not last.isdigit() else name


def _checked_modules(d: Any, names: "Iterable[str]", source: str) -> tuple[ModuleSpec, ...]:
    """An inventory's ``modules`` (see :class:`ModuleSpec`), each field checked against the owning
    modules of the tensor ``names``; raises ModelSpecError naming ``source``, the entry and the field."""
    if d is None:
        return ()
    if not isinstance(d, list):
        raise ModelSpecError(f"{source}: /modules: expected a list")
    if len(d) > MAX_TENSORS:
        raise ModelSpecError(f"{source}: /modules: more than {MAX_TENSORS:,} entries")
    owning = set(map(module_of, names))
    prefixes = {n[:i] for n in owning for i, c in enumerate(n) if c == "."}
    out, seen = [], set()
    for j, e in enumerate(d):
        where = f"{source}: /modules/{j}"
        if not isinstance(e, dict):
            raise ModelSpecError(f"{where}: expected an object, got {json_shown(e)}")
        extra = set(e) - {"name", "sequential", "before", "backward"}
        if extra:
            raise ModelSpecError(f"{where}: unknown key {json_quoted(sorted(extra)[0])}")
        name, seq = e.get("name"), e.get("sequential", False)
        before, bwd = e.get("before"), e.get("backward", True)
        if not isinstance(name, str) or not name:
            raise ModelSpecError(f"{where}/name: expected a non-empty string, got {json_shown(name)}")
        if not isinstance(seq, bool) or not isinstance(bwd, bool):
            raise ModelSpecError(f"{where}/{'sequential' if not isinstance(seq, bool) else 'backward'}: expected true or false")
        if name in seen:
            raise ModelSpecError(f"{where}/name: {json_quoted(name)} is declared twice")
        seen.add(name)
        if name in owning:
            raise ModelSpecError(f"{where}/name: {json_quoted(name)} owns parameters")
        if seq:
            if "before" in e or "backward" in e:
                raise ModelSpecError(f"{where}: a sequential container takes no 'before' or 'backward'")
            if name not in prefixes:
                raise ModelSpecError(f"{where}/name: {json_quoted(name)} contains no module owning parameters")
        else:
            if name in prefixes:
                raise ModelSpecError(f"{where}/name: {json_quoted(name)} contains modules owning parameters: "
                                     "only a leaf is declared ('sequential' for an nn.Sequential)")
            if before is not None and (not isinstance(before, str) or before not in owning):
                raise ModelSpecError(f"{where}/before: expected the name of a module owning parameters or null, "
                                     f"got {json_shown(before)}")
        out.append(ModuleSpec(name, seq, None if seq else before, True if seq else bwd))
    return tuple(out)


class TensorList(list):
    """``Inventory.tensors``: a list that counts its own changes, so :meth:`Inventory.memo`
    knows in O(1) whether the tensors it derived values from are still the ones listed.

    Every mutating list method (``append``, ``extend``, ``insert``, ``pop``, ``remove``,
    ``clear``, ``sort``, ``reverse``, item and slice assignment or deletion, ``+=``, ``*=``)
    bumps ``version``. TensorSpecs are frozen, so a tensor cannot change in place; calling
    ``list``'s methods on it unbound (``list.append(inv.tensors, t)``) would bypass the count.
    """

    version = 0

    def _bump(self) -> None:
        self.version = self.version + 1

    def __setitem__(self, i: Any, v: Any) -> None:
        super().__setitem__(i, v)
        self._bump()

    def __delitem__(self, i: Any) -> None:
        super().__delitem__(i)
        self._bump()

    def __iadd__(self, other: Iterable[TensorSpec]) -> "TensorList":
        r = super().__iadd__(other)
        self._bump()
        return r

    def __imul__(self, n: int) -> "TensorList":
        r = super().__imul__(n)
        self._bump()
        return r

    def append(self, v: TensorSpec) -> None:
        super().append(v)
        self._bump()

    def extend(self, vs: Iterable[TensorSpec]) -> None:
        super().extend(vs)
        self._bump()

    def insert(self, i: int, v: TensorSpec) -> None:
        super().insert(i, v)
        self._bump()

    def pop(self, i: int = -1) -> TensorSpec:
        r = super().pop(i)
        self._bump()
        return r

    def remove(self, v: TensorSpec) -> None:
        super().remove(v)
        self._bump()

    def clear(self) -> None:
        super().clear()
        self._bump()

    def sort(self, *a: Any, **k: Any) -> None:
        super().sort(*a, **k)
        self._bump()

    def reverse(self) -> None:
        super().reverse()
        self._bump()


@dataclass
class Inventory:
    """An ordered list of parameter tensors, plus where it came from."""

    name: str
    #: Always a :class:`TensorList` (a plain list given is copied into one; see :meth:`memo`).
    tensors: list[TensorSpec] = field(default_factory=TensorList)
    #: Free-form provenance (preset name, file path, "--params").
    source: str = ""
    #: Architecture facts other views need (hidden_size, layers, vocab...), when known.
    meta: dict[str, Any] = field(default_factory=dict)
    #: The parsed Hugging Face config.json the inventory was built from (presets and
    #: config.json files), for ``--activations trace``; not part of the JSON form.
    hf_config: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: Modules owning no parameter that the names cannot spell (:class:`ModuleSpec`), in declaration order.
    modules: tuple[ModuleSpec, ...] = ()

    @property
    def numel(self) -> int:
        """All parameters, trainable or frozen (elements; summed once per tensor list, see :meth:`memo`)."""
        return self.memo(("numel",), lambda: sum(t.numel for t in self.tensors))

    @property
    def trainable_numel(self) -> int:
        """Trainable parameters (elements; summed once per tensor list)."""
        return self.memo(("trainable_numel",), lambda: sum(t.numel for t in self.tensors if t.trainable))

    #: One memo of values derived from ``tensors`` (see :meth:`memo`); not part of the value.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # ``tensors`` is always a TensorList, whose changes memo() can see in O(1).
        if name == "tensors" and type(value) is not TensorList:
            value = TensorList(value)
        if name == "modules":
            # the memo is keyed by the tensor list: values derived from the modules too go with a new tuple
            value = tuple(value)
            memo = self.__dict__.get("_memo")
            if memo:
                memo.clear()
        object.__setattr__(self, name, value)

    def memo(self, key: Any, compute: Any) -> Any:
        """``compute()``, computed once per (tensor list, ``key``): generate asks for the same
        derived tables (param groups, ZeRO-3 sub-groups, module sizes) for thousands of plans.

        The memo is keyed by the tensor list's identity and its :class:`TensorList` version,
        an O(1) check (generate calls this ~10^5 times; comparing a saved copy of a 9e5-tensor
        list cost ~0.3 ms a call, issue 21). Any change to ``tensors`` (append, replace,
        ``tensors[:] = ...``, assigning a new list) changes one or the other, and the memo
        keeps the list it was built for alive, so an identity is never reused. TensorSpecs are
        frozen, so the listed tensors cannot change in place. Only the latest tensor list's
        values are kept. Callers must not mutate what it returns.
        """
        ts = self.tensors
        keep = self._memo.get("keep")
        if keep is None or keep[0] is not ts or keep[1] != ts.version:
            self._memo.clear()
            self._memo["keep"] = (ts, ts.version)
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def forget(self, key: Any) -> None:
        """Drop :meth:`memo`'s value for ``key`` (if any), so that what it holds can be freed; a later
        ``memo(key, ...)`` computes it again. generate drops a layout's pipeline-stage shards once it
        has searched that layout (issue 21)."""
        self._memo.pop(key, None)

    def groups(self, trainable_only: bool = True) -> list[list[TensorSpec]]:
        """Tensors split by optimizer param group, groups in index order, each in model order
        (fresh lists; the split itself is memoised, see :meth:`memo`)."""
        def split() -> tuple[tuple[TensorSpec, ...], ...]:
            by: dict[int, list[TensorSpec]] = {}
            for t in self.tensors:
                if trainable_only and not t.trainable:
                    continue
                by.setdefault(t.group, []).append(t)
            return tuple(tuple(by[k]) for k in sorted(by))
        return [list(g) for g in self.memo(("groups", trainable_only), split)]

    def regrouped(self, groups: "list[int]") -> "Inventory":
        """This inventory with tensor i in param group ``groups[i]`` (itself when no group changes). A tensor
        whose group is unchanged is the same object; a changed :class:`LayerTensorSpec` stays one (its prefix and
        suffix shared, issue 21). The memo's name-only tables go with it: ``in_layer_flags``, and ``layer_repeat``
        (which tensors are copies of one layer) where the new groups repeat with its layers too; every other
        derived table is made again. The columns are compared at C level and only the changed tensors visited
        (issue 21: 9e5 tensors, ~2e5 of them changed at 1e5 llama layers)."""
        ts = self.tensors
        old = list(map(operator.attrgetter("group"), ts))
        if old == groups:
            return self
        new, put = object.__new__, object.__setattr__  # frozen: the slots set as dataclass __init__ does
        out = list(ts)
        # No cyclic GC while the copies are made (as model.specs._repeat_layers): they hold no cycles, and each
        # collection would walk the whole inventory -- half the time of 2e5 copies at 1e5 layers (issue 21).
        was = gc.isenabled()
        gc.disable()
        try:
            # one changed index at a time (no list of them: ~2e5 int objects among the new tensors)
            for i in itertools.compress(range(len(ts)), map(operator.ne, old, groups)):
                t = ts[i]
                c = new(type(t))
                if type(t) is LayerTensorSpec:
                    put(c, "prefix", t.prefix)
                    put(c, "suffix", t.suffix)
                else:
                    put(c, "name", t.name)
                put(c, "shape", t.shape)
                put(c, "trainable", t.trainable)
                put(c, "dtype", t.dtype)
                put(c, "numel", t.numel)
                put(c, "group", groups[i])
                out[i] = c
        finally:
            if was:
                gc.enable()
        del old
        inv = Inventory(name=self.name, tensors=out, source=self.source, meta=self.meta, hf_config=self.hf_config,
                        modules=self.modules)
        keep = self._memo.get("keep")
        if keep is not None and keep[0] is ts and keep[1] == ts.version:
            rep = self._memo.get(("layer_repeat",))
            if ("layer_repeat",) in self._memo and (
                    rep is None or groups[rep.head:rep.end - rep.unit] == groups[rep.head + rep.unit:rep.end]):
                inv.memo(("layer_repeat",), lambda: rep)
            if ("in_layer_flags",) in self._memo:
                inv.memo(("in_layer_flags",), lambda v=self._memo[("in_layer_flags",)]: v)
        return inv

    def has_trainable(self) -> bool:
        """True when some tensor is trainable, i.e. :meth:`groups` is not empty (without copying
        the groups: the ledger asks once per plan and rank role)."""
        return self.memo(("has_trainable",), lambda: any(t.trainable for t in self.tensors))

    def largest(self, trainable_only: bool = False) -> TensorSpec | None:
        ts = [t for t in self.tensors if t.trainable or not trainable_only]
        return max(ts, key=lambda t: t.numel, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "meta": self.meta,
            "tensors": [
                {"name": t.name, "shape": list(t.shape), "trainable": t.trainable, "group": t.group,
                 **({"dtype": t.dtype} if t.dtype else {})}
                for t in self.tensors
            ],
            **({"modules": [m.to_dict() for m in self.modules]} if self.modules else {}),
        }


#: Largest synthetic tensor for ``--params`` (elements): a 4096 x 4096 projection. A power
#: of two, so ZeRO-3's per-tensor padding to the world size is zero for power-of-two worlds.
PARAM_CHUNK = 1 << 24
#: At most this many synthetic tensors: beyond 2^16 x 2^24 (1.1e12) elements the chunk
#: doubles instead, so --params 1e15 stays a few thousand tensors.
MAX_PARAM_CHUNKS = 1 << 16
#: --params upper bound (elements): 10^16, four orders of magnitude over today's largest models.
MAX_PARAMS = 10**16


def from_param_count(n: int, name: str | None = None, chunk: int = PARAM_CHUNK) -> Inventory:
    """An inventory of ``n`` trainable elements (``--params N``) in one param group: tensors of
    ``chunk`` elements and one remainder tensor (see the module docstring for why).

    Raises ModelSpecError for n < 1.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ModelSpecError(f"--params must be a positive integer, got {json_shown(n)}")
    if n > MAX_PARAMS:
        raise ModelSpecError(f"--params {n} is over the {MAX_PARAMS:.0e}-parameter limit")
    while n // chunk > MAX_PARAM_CHUNKS:
        chunk *= 2
    full, rest = divmod(n, chunk)
    tensors = [TensorSpec(f"params.{i}", (chunk,)) for i in range(full)]
    if rest:
        tensors.append(TensorSpec(f"params.{full}", (rest,)))
    return Inventory(name=name or f"--params {n:,}", tensors=tensors, source="--params",
                     meta={"params": n, "chunk": chunk})


def _over_limit(n: int, source: str) -> ModelSpecError:
    """The refusal of a ``tensors`` list of ``n`` entries, more than :data:`MAX_TENSORS`: "entries", not
    "tensors", since a list that long is refused before its entries are checked (they may be numbers)."""
    return ModelSpecError(f"{source}: /tensors: {n:,} entries, over the limit of {MAX_TENSORS:,} tensors")


#: What every entry of an inventory's ``tensors`` list must be, as the refusals say it.
TENSOR_ENTRY = 'an object (one tensor, e.g. {"name": "w", "shape": [64, 64]})'


def _not_a_tensor(i: int, kind: str, source: str) -> ModelSpecError:
    """The refusal of entry ``i`` of ``tensors``, which is ``kind`` (``validation.json_kind``'s words: "a
    number", "an array", "null", ...), not an object: one line naming the file, the entry and what it must be.
    The same words whether the counting scan (``readers.object_list_scan_kind``, from the entry's first
    character) or the parse (:func:`from_dict`, from the value) finds it."""
    return ModelSpecError(f"{source}: /tensors/{i}: expected {TENSOR_ENTRY}, got {kind}")


def refuse_over_limit(text: str, source: str) -> None:
    """Raise ModelSpecError (a message :func:`from_dict` gives) when ``text``, an inventory's
    JSON, may list more than MAX_TENSORS tensors and is refused, before it is parsed into objects.

    A list of more than MAX_TENSORS entries has at least MAX_TENSORS commas, so any other text
    costs one ``str.count``. Past that:

    * only a text with more than MAX_TENSORS ``{`` can list that many tensor objects; one that
      has them is counted by :func:`advisor.config.readers.list_length_at` (no object kept) and
      refused over the limit;
    * a list with an entry that is not an object (``[[64, 64], ...]``, ``[1, 1, ...]``, or
      ``[{"shape": [1]}, [], [], ...]``) is refused at the first such entry, ``/tensors/I: expected
      an object (one tensor ...), got an array`` as :func:`from_dict` would say, found by
      :func:`advisor.config.readers.object_list_scan_kind` without parsing the list (22M ``[]`` in
      64 MiB took 16 s and 1.7 GB to parse first; after one object, 3.0 s and 1.6 GB, now 0.3 s
      and 160 MB: issue 21); where that scan read the list window by window (entries nested
      deeper than its regex) it has counted them too, and a count over the limit is refused
      without a second pass (2,000,001 objects six deep: 8.2 s and 1 GB, now ~3 s and ~0.2 GB);
    * a key written twice in one object is refused (``file:line:col: duplicate key 'tensors'``) by that
      counting pass: ``{"tensors": [1.5M entries], "tensors": [1 entry]}`` counted the last list, 1, and was
      read as one tensor after all 1.5M objects were built (issue D6). ``list_start_at`` declines a
      ``tensors`` written twice, so either order reaches the count when the text holds more than
      MAX_TENSORS ``{``; with fewer, no list can hold that many objects, and the parse refuses the repeat.
    """
    if text.count(",") < MAX_TENSORS:
        return
    from advisor.config.readers import (DuplicateKey, duplicate_key_position, duplicate_key_problem, error_as,
                                        list_length_at, list_start_at, object_list_scan_kind)
    bad, n, kind = object_list_scan_kind(text, "tensors")
    if bad is not None:
        raise _not_a_tensor(bad, kind, source)
    if n is None:
        # every entry an object: only a list holding more than MAX_TENSORS "{" can be too long. Counted from the
        # list's "[" (every "{" before it is the document's own, or another key's), so an inventory of exactly
        # MAX_TENSORS tensors (MAX_TENSORS + 1 "{" with the top-level object's) is not parsed twice
        i = list_start_at(text, "tensors")
        if text.count("{", 0 if i is None else i) <= MAX_TENSORS:
            return
        try:
            n = list_length_at(text, "tensors")
        except DuplicateKey as e:  # "tensors" (or any key) twice: refused whichever list comes first (issue D6)
            raise error_as(ModelSpecError)(source, duplicate_key_problem(e.key), *duplicate_key_position(text, e))
    if n is not None and n > MAX_TENSORS:
        raise _over_limit(n, source)


#: Entries :func:`from_dict` builds per pass: the parsed dicts of a pass are dropped as its
#: TensorSpecs are made (``consume``), so a file's dicts and its specs are not all alive at once.
FROM_DICT_CHUNK = 1 << 16


def from_dict(d: Any, source: str, *, consume: bool = False) -> Inventory:
    """Build an inventory from its JSON form; raises ModelSpecError naming ``source`` and the
    offending tensor on any malformed entry.

    ``consume``: the caller will not read ``d["tensors"]`` again, so each pass of
    :data:`FROM_DICT_CHUNK` entries is released as soon as its TensorSpecs exist and the list is
    left empty: the parsed dicts (~290 B a tensor) and the specs (~180 B) of a 1.9M-tensor file
    peaked together at 1.0 GB (issue 21). The file readers pass it; the result is the same."""
    if not isinstance(d, dict):
        raise ModelSpecError(f"{source}: expected an object with a non-empty 'tensors' list (an inventory), "
                             f"got {json_kind(d)}")
    if "tensors" not in d:
        raise ModelSpecError(f"{source}: an inventory needs a non-empty 'tensors' list; there is no 'tensors' key")
    if not isinstance(d["tensors"], list) or not d["tensors"]:
        got = "an empty array" if d["tensors"] == [] else json_kind(d["tensors"])
        raise ModelSpecError(f"{source}: /tensors: expected a non-empty array of tensor objects, got {got}")
    entries = d["tensors"]
    if len(entries) > MAX_TENSORS:
        raise _over_limit(len(entries), source)
    out = TensorList()
    interned: dict[tuple[int, ...], tuple[int, int]] = {}
    for a in range(0, len(entries), FROM_DICT_CHUNK):
        part = entries[a:a + FROM_DICT_CHUNK]
        specs = _bulk_tensors(part, a, interned)
        if specs is None:  # some entry is not the plain valid form: check each in turn, naming the first bad one
            specs = [_checked_tensor(t, a + i, source) for i, t in enumerate(part)]
        out.extend(specs)
        if consume:
            entries[a:a + len(part)] = [None] * len(part)
        del part, specs
    if consume:
        entries.clear()
    return _inventory_of(d, out, source)


def _inventory_of(d: dict, out: "TensorList", source: str) -> Inventory:
    """The Inventory of an inventory's JSON form ``d`` whose tensors are ``out`` (already built and
    checked): its name, meta and modules (checked against the tensor names)."""
    return Inventory(name=str(d.get("name", os.path.basename(source))), tensors=out, source=source,
                     meta=d.get("meta") if isinstance(d.get("meta"), dict) else {},
                     modules=_checked_modules(d.get("modules"), map(operator.attrgetter("name"), out), source))


class ChunkedText:
    """An inventory's JSON text whose ``tensors`` list is read :data:`FROM_DICT_CHUNK` entries at a
    time (:func:`chunked_text`): ``rest`` is the document parsed with that list left empty (its name,
    meta, modules), ``spans`` the text offsets of each run of entries (objects, without the commas
    around the run)."""

    __slots__ = ("text", "rest", "spans")

    def __init__(self, text: str, rest: dict, spans: "list[tuple[int, int]]"):
        self.text, self.rest, self.spans = text, rest, spans

    def chunks(self) -> "Iterator[list[Any]] | None":
        """Each run's entries, parsed (``json.loads`` of the run, the guards of ``readers.parse_json``:
        finite numbers); a run that does not parse ends the iteration with None."""
        import json
        from advisor.config.readers import _finite_float, _refuse_constant, unique_object_hook
        for a, b in self.spans:
            try:
                part = json.loads("[" + self.text[a:b] + "]", object_pairs_hook=unique_object_hook(),
                                  parse_constant=_refuse_constant, parse_float=_finite_float)
            except (ValueError, RecursionError):  # JSONDecodeError, non-finite, digit limit, a key twice
                yield None
                return
            yield part

    def build(self, source: str) -> "Inventory | None":
        """The Inventory, built run by run (each run's dicts dropped once its TensorSpecs exist), or None
        when some run does not parse or holds an entry :func:`from_dict` would refuse: the caller's
        whole parse (``readers.parse_json`` then :func:`from_dict`) then says what is wrong, the error
        it always gave (a syntax error after a bad entry is the one reported)."""
        out = TensorList()
        interned: dict[tuple[int, ...], tuple[int, int]] = {}
        for part in self.chunks():
            if part is None or not part:
                return None
            a = len(out)
            specs = _bulk_tensors(part, a, interned)
            if specs is None:
                try:
                    specs = [_checked_tensor(t, a + i, source) for i, t in enumerate(part)]
                except ModelSpecError:
                    return None
            out.extend(specs)
            del part, specs
        if not out or len(out) > MAX_TENSORS:
            return None
        return _inventory_of(self.rest, out, source)


def chunked_text(text: str) -> "ChunkedText | None":
    """``text`` (an inventory's JSON that :func:`refuse_over_limit` passed) as a :class:`ChunkedText`,
    or None where the chunked read does not apply: the top level is not an object with a ``tensors``
    list written once (``readers.list_start_at``), the list is empty or not objects all the way
    (``readers._OBJECT_ENTRY``: nested at most ``_REGEX_DEPTH`` deep), nesting is past
    ``readers.MAX_DEPTH``, or the rest of the document does not parse. Entries are found by the
    regex alone (C speed, no object built); JSON is context-free, so each run parsed alone gives the
    entries the whole parse gives.

    Why: ``json.loads`` of the whole file held every entry's dict at once, ~300 B a tensor: the
    peak of reading a 2,000,000-tensor inventory was 616 MB traced (tracemalloc), over the issue's
    "few hundred MB" before the ledger ran (issue 21)."""
    import json
    import re
    from advisor.config.readers import (_OBJECT_ENTRY, _finite_float, _refuse_constant, depth_ok, gc_paused,
                                        list_start_at, unique_object_hook)
    if not depth_ok(text):
        return None
    i = list_start_at(text, "tensors")
    if i is None:
        return None
    run = _CHUNK_RE.get(FROM_DICT_CHUNK)
    if run is None:
        run = _CHUNK_RE[FROM_DICT_CHUNK] = (re.compile("(?:" + _OBJECT_ENTRY + ",){1,%d}+" % FROM_DICT_CHUNK),
                                            re.compile(_OBJECT_ENTRY + r"\]"))
    many, last = run
    spans, pos = [], i + 1
    while (m := many.match(text, pos)) is not None:
        spans.append((pos, m.end() - 1))
        pos = m.end()
    m = last.match(text, pos)
    if m is None:
        return None  # an empty list, an entry that is not an object (or nested deeper), malformed
    spans.append((pos, m.end() - 1))
    try:
        with gc_paused():
            rest = json.loads(text[:i] + "[]" + text[m.end():], object_pairs_hook=unique_object_hook(),
                              parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):  # also readers.DuplicateKey: the whole parse names the key and its place
        return None
    if not isinstance(rest, dict) or rest.get("tensors") != []:
        return None
    return ChunkedText(text, rest, spans)


#: FROM_DICT_CHUNK -> the compiled regexes of :func:`chunked_text` (a run of up to that many entries
#: each followed by a comma; the last entry and the list's ``]``).
_CHUNK_RE: dict[int, tuple[Any, Any]] = {}


def _slot_setters() -> tuple[Any, ...]:
    return tuple(TensorSpec.__dict__[f].__set__ for f in ("name", "shape", "trainable", "group", "dtype", "numel"))


_SET_NAME, _SET_SHAPE, _SET_TRAINABLE, _SET_GROUP, _SET_DTYPE, _SET_NUMEL = _slot_setters()


def _new_specs(names: list[str], shapes: list[tuple[int, ...]], trainable: list[bool], groups: list[int],
               dtypes: Iterable[str | None], numels: Iterable[int]) -> list[TensorSpec]:
    """``[TensorSpec(*f) for f in zip(names, shapes, trainable, groups, dtypes)]`` for fields
    already checked, built column by column: ``object.__new__`` and each slot's setter mapped at C
    speed over the whole column (no Python frame per tensor, ~2x faster than a per-tensor
    function), ``numel`` given (the product of the shape, as ``__post_init__`` computes it)."""
    from collections import deque
    from itertools import repeat
    out = list(map(object.__new__, repeat(TensorSpec, len(names))))
    for setter, col in ((_SET_NAME, names), (_SET_SHAPE, shapes), (_SET_TRAINABLE, trainable),
                        (_SET_GROUP, groups), (_SET_DTYPE, dtypes), (_SET_NUMEL, numels)):
        deque(map(setter, out, col), maxlen=0)
    return out


def _bulk_tensors(entries: list[Any], first: int = 0,
                  interned: dict[tuple[int, ...], tuple[int, int]] | None = None) -> list[TensorSpec] | None:
    """The TensorSpecs of ``entries`` (an inventory's ``tensors``, the first of them at index
    ``first``, which names a nameless one ``t{index}``) when every entry is the plain valid form
    (an object; ``shape`` a list of at most 8 ints in [1, MAX_TENSOR_NUMEL] with a product of at
    most that; ``trainable`` a bool; ``group`` a non-negative int; ``name`` a string or absent;
    ``dtype`` a known dtype name or absent),
    else None, and :func:`_checked_tensor` then names the first bad entry.

    Each check is one C-level pass over all entries (``map``, ``set``, ``min``, ``max``): the
    same checks per entry in Python took ~1.5 s of a 1M-tensor inventory (issue 21). Equal shapes
    share one tuple and one numel int (``interned``: shape -> (the tuple, its product), kept
    across calls by :func:`from_dict`)."""
    from itertools import chain, repeat

    n = len(entries)
    if set(map(type, entries)) != {dict}:
        return None
    get = dict.get
    shapes = list(map(get, entries, repeat("shape", n)))
    if set(map(type, shapes)) != {list} or max(map(len, shapes)) > 8:
        return None
    dims = list(chain.from_iterable(shapes))
    if dims and (set(map(type, dims)) != {int} or min(dims) < 1 or max(dims) > MAX_TENSOR_NUMEL):
        return None
    del dims
    trainable = list(map(get, entries, repeat("trainable", n), repeat(True, n)))
    groups = list(map(get, entries, repeat("group", n), repeat(0, n)))
    if set(map(type, trainable)) - {bool} or set(map(type, groups)) != {int} or min(groups) < 0:
        return None
    names = list(map(get, entries, repeat("name", n)))
    if set(map(type, names)) != {str}:
        if any(v is None and "name" not in e for v, e in zip(names, entries)):
            # str(e.get("name", f"t{index}")) mapped at C speed (a comprehension was ~0.5 s of a 1.9M
            # nameless inventory)
            names = list(map(str, map(get, entries, repeat("name", n), map("t{}".format, range(first, first + n)))))
        else:
            names = list(map(str, names))
    if interned is None:
        interned = {}
    keys = list(map(tuple, shapes))
    del shapes
    for k in set(keys).difference(interned):
        interned[k] = (k, math.prod(k) if k else 1)
    if max(interned[k][1] for k in set(keys)) > MAX_TENSOR_NUMEL:
        return None
    dtypes = list(map(get, entries, repeat("dtype", n)))
    if not set(map(type, dtypes)) <= {str, type(None)} or not set(dtypes) <= _INVENTORY_DTYPES:
        return None
    pairs = list(map(interned.__getitem__, keys))
    del keys
    return _new_specs(names, [p[0] for p in pairs], trainable, groups, dtypes, [p[1] for p in pairs])


#: What a tensor's ``dtype`` may be in an inventory: absent / null, a torch dtype name, with or
#: without ``torch.``, or a DeepSpeed spelling (``bf16``) (advisor.config.dtypes, the one table).
_INVENTORY_DTYPES = frozenset([None, *TORCH_DTYPE_BYTES, *(f"torch.{k}" for k in TORCH_DTYPE_BYTES),
                               *TRAINING_DTYPE_ALIASES])


def _checked_tensor(t: Any, i: int, source: str) -> TensorSpec:
    """Tensor ``i`` of an inventory's JSON form, each field checked in turn; raises
    ModelSpecError naming ``source``, the tensor and the field."""
    where = f"{source}: /tensors/{i}"
    if not isinstance(t, dict):
        raise _not_a_tensor(i, json_kind(t), source)  # as the counting scan says it (kind words, no value)
    shape = t.get("shape")
    if (not isinstance(shape, list) or len(shape) > 8
            or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_TENSOR_NUMEL for x in shape)
            or math.prod(shape) > MAX_TENSOR_NUMEL):
        raise ModelSpecError(f"{where}/shape: expected a list of at most 8 positive integers with a product of at "
                             f"most {MAX_TENSOR_NUMEL}, got {json_shown(shape)}")
    trainable = t.get("trainable", True)
    group = t.get("group", 0)
    if not isinstance(trainable, bool):
        raise ModelSpecError(f"{where}/trainable: expected true or false, got {json_shown(trainable)}")
    if not isinstance(group, int) or isinstance(group, bool) or group < 0:
        raise ModelSpecError(f"{where}/group: expected a non-negative integer, got {json_shown(group)}")
    dtype = t.get("dtype")
    if dtype is not None and (problem := dtype_problem(dtype, deepspeed_names=True)):
        raise ModelSpecError(f"{where}/dtype: {problem}")
    return TensorSpec(str(t.get("name", f"t{i}")), tuple(shape), trainable, group, dtype)


def load_inventory(path: str) -> Inventory:
    """Read an inventory JSON file. Raises ModelSpecError (one line) when unreadable."""
    from advisor.config.readers import MAX_MODEL_BYTES, error_as, parse_json, read_text
    error = error_as(ModelSpecError)
    text = read_text(path, limit=MAX_MODEL_BYTES, what="inventory", error=error)
    refuse_over_limit(text, path)
    chunked = chunked_text(text)
    if chunked is not None:
        from advisor.config.readers import gc_paused
        with gc_paused():
            inv = chunked.build(path)
        if inv is not None:
            return inv
        del chunked
    return from_dict(parse_json(text, "<stdin>" if path == "-" else path, what="inventory", error=error), path,
                     consume=True)


def from_module(module: Any, name: str | None = None, param_groups: Iterable[Iterable[Any]] | None = None) -> Inventory:
    """Export the inventory of a live ``torch.nn.Module`` (the documented one-call API).

    ``param_groups``: optionally the optimizer's param groups (lists of parameters) so that
    group indices match what DeepSpeed will see; default: one group. Frozen parameters
    (``requires_grad=False``) are recorded as not trainable.
    """
    group_of: dict[int, int] = {}
    if param_groups is not None:
        for gi, g in enumerate(param_groups):
            for p in g:
                group_of[id(p)] = gi
    tensors = []
    for pname, p in module.named_parameters():
        tensors.append(TensorSpec(pname, tuple(int(x) for x in p.shape), bool(p.requires_grad),
                                  group_of.get(id(p), 0), str(p.dtype).replace("torch.", "")))
    return Inventory(name=name or type(module).__name__, tensors=tensors, source="from_module",
                     meta={LAYERNORM_META: layernorm_parameter_names(module)})


#: ``Inventory.meta`` key: the names of the parameters inside an ``nn.LayerNorm`` (a list of strings), recorded by
#: :func:`from_module` from the modules' classes; the HF Trainer's no-decay split reads it
#: (:func:`advisor.config.hf.trainer_no_decay`). Absent (a preset, a config.json spec, a hand-written inventory):
#: unknown, and the split guesses from the names and shapes.
LAYERNORM_META = "layernorm_params"


def layernorm_parameter_names(module: Any) -> list[str]:
    """The names (as ``module.named_parameters()`` gives them) of the parameters the HF Trainer leaves out of its
    decay group by their module's class: transformers 5.25.0 ``trainer.py`` get_decay_parameter_names l.1432 calls
    ``get_parameter_names(model, [nn.LayerNorm], ...)``, which drops every parameter of a child module that
    ``isinstance(child, nn.LayerNorm)`` (``trainer_pt_utils.py`` l.1348-1369, the test at l.1361: subclasses too,
    whatever its parameters -- ``nn.LayerNorm(bias=False)`` has a weight alone; the root module's own parameters
    are never dropped by class, l.1364-1367)."""
    from torch import nn
    names = {n for n, _ in module.named_parameters()}
    return [f"{mn}.{pn}" for mn, m in module.named_modules() if mn and isinstance(m, nn.LayerNorm)
            for pn, _ in m.named_parameters() if f"{mn}.{pn}" in names]


def layernorm_names(inventory: "Inventory") -> "frozenset[str] | None":
    """The :data:`LAYERNORM_META` names of ``inventory`` as a set, or None where the inventory does not record its
    modules' classes."""
    v = inventory.meta.get(LAYERNORM_META)
    return frozenset(v) if isinstance(v, list) else None
