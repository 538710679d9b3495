"""The one codec: typed records <-> strict JSON, errors that name the field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import pytest

from nkitui.common.codec import CodecError, Record, decode, decode_versioned, encode, encode_versioned, register_adapter


@dataclass(frozen=True)
class Point(Record):
    x: float
    y: float = 0.0
    _codec_computed: ClassVar = ("norm",)

    @property
    def norm(self) -> float:
        return math.hypot(self.x, self.y)


@dataclass(frozen=True)
class Shape(Record):
    name: str
    kind: Literal["line", "ring"]
    points: tuple[Point, ...] = ()
    tags: dict[str, int] = field(default_factory=dict)
    origin: Point | None = None
    seeds: tuple[int, ...] | int | None = None
    where: Path | None = None
    scratch: str = "kept out"
    _codec_omit: ClassVar = ("scratch",)


def test_a_record_round_trips_through_strict_json():
    s = Shape("s", "ring", (Point(3, 4), Point(float("nan"), -math.inf)), {"a": 1}, Point(1), (1, 2), Path("/x"))
    text = json.dumps(encode(s), allow_nan=False)
    d = json.loads(text)
    assert d["points"][0] == {"x": 3.0, "y": 4.0, "norm": 5.0}  # computed properties are written out
    assert d["points"][1]["x"] == "nan" and d["points"][1]["y"] == "-inf"
    assert "scratch" not in d
    back = Shape.from_dict(d)
    assert back.points[0] == Point(3, 4) and math.isnan(back.points[1].x) and back.points[1].y == -math.inf
    assert back.seeds == (1, 2) and back.where == Path("/x") and back.scratch == "kept out"


def test_numpy_values_become_plain_json():
    assert encode({"a": np.float32(1.5), "b": np.arange(3), "c": np.int64(7), "d": np.bool_(True)}) == \
        {"a": 1.5, "b": [0, 1, 2], "c": 7, "d": True}


@pytest.mark.parametrize("data, message", [
    ({"kind": "line"}, "name: required field is missing"),
    ({"name": "s", "kind": "square"}, "kind: expected one of 'line', 'ring', got 'square'"),
    ({"name": "s", "kind": "line", "points": [{"x": "wide"}]}, "points[0].x: expected a number, got str 'wide'"),
    ({"name": "s", "kind": "line", "tags": {"a": 1.5}}, "tags.a: expected a whole number, got float 1.5"),
    ({"name": "s", "kind": "line", "origin": [1, 2]}, "origin: expected a table (JSON object) for Point, got list"),
    ({"name": "s", "kind": "line", "seeds": "all"}, "seeds: str 'all' fits none of tuple"),
    ({"name": 3, "kind": "line"}, "name: expected text, got int 3"),
])
def test_errors_name_the_field_by_its_path(data, message):
    with pytest.raises(CodecError) as err:
        decode(Shape, data)
    assert message in str(err.value)


def test_strict_decoding_refuses_unknown_fields_but_accepts_computed_ones():
    assert decode(Point, {"x": 1, "norm": 1.0}, strict=True) == Point(1)
    with pytest.raises(CodecError, match="unknown field.*'z'.*known: x, y"):
        decode(Point, {"x": 1, "z": 2}, strict=True)
    assert decode(Point, {"x": 1, "z": 2}) == Point(1)  # tolerant by default: newer writers add fields


def test_versions_upgrade_step_by_step_and_newer_ones_are_refused():
    old = {"schema": "pts", "schema_version": 1, "x": 2}
    upgraded = decode_versioned(Point, old, "pts", 2, migrations={1: lambda d: {**d, "y": 5}})
    assert upgraded == Point(2, 5)
    with pytest.raises(CodecError, match="schema version 3 is newer than this nkitui reads .2."):
        decode_versioned(Point, {"schema": "pts", "schema_version": 3, "x": 1}, "pts", 2)
    with pytest.raises(CodecError, match="schema version 1 is not supported"):
        decode_versioned(Point, old, "pts", 2)
    with pytest.raises(CodecError, match="not an nkitui record .schema 'other'"):
        decode_versioned(Point, {"schema": "other", "schema_version": 2}, "pts", 2)
    assert encode_versioned(Point(1), "pts", 2)["schema_version"] == 2


class Opaque:
    def __init__(self, value: int) -> None:
        self.value = value


@dataclass(frozen=True)
class Holder(Record):
    inner: Opaque


def test_an_adapter_encodes_a_record_owned_elsewhere():
    register_adapter(Opaque, lambda o: {"v": o.value}, lambda d: Opaque(int(d["v"])))
    d = Holder(Opaque(4)).to_dict()
    assert d == {"inner": {"v": 4}}
    assert Holder.from_dict(d).inner.value == 4
    with pytest.raises(CodecError, match="inner: not a valid Opaque"):
        Holder.from_dict({"inner": {}})
