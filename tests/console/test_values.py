"""Register values as the console's page shows and edits them, and its register file: a value read is shown as its
type and plain data and written back unchanged; a user's text becomes the register's own kind (any element count:
the node judges it), and only what no such register could hold is refused here; the file round-trips."""

from __future__ import annotations

import math

import pytest

from servo_node.console._values import (
    EncodingError,
    describe,
    elements,
    encode,
    export_document,
    import_document,
    kind_of,
    type_name,
)


def test_values_show_their_type_and_read_back_as_written() -> None:
    v = encode("real32", "-10, 10")
    assert (kind_of(v), type_name(v), elements(v)) == ("real32", "real32[2]", [-10.0, 10.0])
    assert elements(encode("real32", "0.1")) == [0.1]  # the float32 shown as its shortest decimal
    assert elements(encode("real32", [0.1, "inf"])) == [0.1, math.inf]  # the node judges infinities
    assert type_name(encode("natural16", "65535")) == "natural16"
    assert elements(encode("string", "velocity")) == "velocity"
    assert elements(encode("bit", "true 0 off")) == [True, False, False]
    assert elements(encode("integer8", "[-128, 127]")) == [-128, 127]
    assert elements(encode("unstructured", "00ff")) == "00ff"
    v = encode("real64", "1 2 3")
    assert describe(v, True, False) == {"type": "real64[3]", "kind": "real64", "value": [1.0, 2.0, 3.0],
                                        "mutable": True, "persistent": False}
    for kind in ("real32", "natural16", "string", "bit"):
        v = encode(kind, "1")
        assert elements(encode(kind, elements(v))) == elements(v)


@pytest.mark.parametrize(("kind", "text", "why"), [
    ("natural16", "65536", "outside the range"),
    ("natural8", "-1", "outside the range"),
    ("integer16", "1.5", "not an integer"),
    ("real32", "fast", "not a number"),
    ("real32", "", "no value"),
    ("bit", "maybe", "not a bit"),
    ("unstructured", "xyz", "hexadecimal"),
    ("string", "x" * 256, "255 bytes"),
    ("real32", " ".join(["1"] * 300), "do not fit"),
])
def test_what_no_register_of_the_kind_holds_is_refused_here(kind: str, text: str, why: str) -> None:
    with pytest.raises(EncodingError, match=why):
        encode(kind, text)


def test_the_register_file_round_trips_its_mutable_registers() -> None:
    regs = {"servo.profile.jerk": describe(encode("real32", "200"), True, True),
            "sys.status": describe(encode("string", "{}"), False, False)}
    doc = export_document({21: {"name": "servo", "registers": regs}}, "2026-11-28T10:00:00+0000")
    wanted = import_document(doc)
    assert [(w.node_id, w.name, w.kind, w.value) for w in wanted] == [(21, "servo.profile.jerk", "real32", [200.0])]
    assert [w.node_id for w in import_document(doc, {21: 22})] == [22]
    for bad, why in [({}, "format"), ({**doc, "version": 2}, "version"), ({**doc, "nodes": {"x": {}}}, "node-ID"),
                     ({**doc, "nodes": {"21": {"registers": {"a": {"value": 1}}}}}, "kind and value")]:
        with pytest.raises(EncodingError, match=why):
            import_document(bad)
