"""The project's own DSDL tree (``cyphal_common/dsdl/``) must be wire-compatible with the public reference definitions.

Every type we define is compiled with pydsdl and compared, model against model, with the type of the same
name and version in the reference (OpenCyphal public_regulated_data_types and Zubax DSDL): fixed port-ID,
kind, sealing/extent, union-ness, bit-length set, fields (name, type, order, padding) and constants.

The reference is looked up in ``$CYPHAL_SERVO_DSDL_REFERENCE`` or ``<repo>/../shared/dsdl-reference``;
the comparison tests are skipped only when it is absent.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pydsdl
import pytest

from cyphal_common.dsdl import DEFAULT_DSDL_DIR, root_namespace_dirs

REPO_ROOT = Path(__file__).resolve().parents[2]
OUR_DSDL = DEFAULT_DSDL_DIR
ROOTS = ("uavcan", "reg", "zubax")

# Full bit-length-set expansion is exact but slow for big variable-length types; above this many bits
# we compare min, max, fixed-ness and the residues modulo 8 and 32 instead.
FULL_BLS_MAX_BITS = 4200

# Types the project relies on (servo I/O, pycyphal.application, yakut). The tree must not lose any of these.
REQUIRED_TYPES = [
    *[f"uavcan.diagnostic.{n}" for n in ("Record.1.0", "Record.1.1", "Severity.1.0")],
    *[
        f"uavcan.node.{n}"
        for n in (
            "GetInfo.1.0",
            "GetTransportStatistics.0.1",
            "ExecuteCommand.1.0",
            "ExecuteCommand.1.1",
            "ExecuteCommand.1.2",
            "ExecuteCommand.1.3",
            "Heartbeat.1.0",
            "Health.1.0",
            "ID.1.0",
            "IOStatistics.0.1",
            "Mode.1.0",
            "Version.1.0",
        )
    ],
    *[
        f"uavcan.node.port.{n}"
        for n in (
            "List.0.1",
            "List.1.0",
            "ID.1.0",
            "ServiceID.1.0",
            "ServiceIDList.0.1",
            "ServiceIDList.1.0",
            "SubjectID.1.0",
            "SubjectIDList.0.1",
            "SubjectIDList.1.0",
        )
    ],
    "uavcan.primitive.Empty.1.0",
    "uavcan.primitive.String.1.0",
    "uavcan.primitive.Unstructured.1.0",
    *[
        f"uavcan.primitive.{kind}.{n}{bits}.1.0"
        for kind in ("scalar", "array")
        for n, widths in (("Integer", (8, 16, 32, 64)), ("Natural", (8, 16, 32, 64)), ("Real", (16, 32, 64)))
        for bits in widths
    ],
    "uavcan.primitive.scalar.Bit.1.0",
    "uavcan.primitive.array.Bit.1.0",
    *[f"uavcan.register.{n}" for n in ("Access.1.0", "List.1.0", "Name.1.0", "Value.1.0")],
    *[
        f"uavcan.time.{n}"
        for n in (
            "GetSynchronizationMasterInfo.0.1",
            "Synchronization.1.0",
            "SynchronizedTimestamp.1.0",
            "TAIInfo.0.1",
            "TimeSystem.0.1",
        )
    ],
    "uavcan.file.Path.1.0",
    "uavcan.file.Path.2.0",
    "uavcan.pnp.NodeIDAllocationData.1.0",
    "uavcan.pnp.NodeIDAllocationData.2.0",
    *[
        f"uavcan.si.{kind}.{q}.Scalar.1.0"
        for kind in ("unit", "sample")
        for q in (
            "angle",
            "angular_velocity",
            "angular_acceleration",
            "torque",
            "length",
            "velocity",
            "acceleration",
            "force",
            "duration",
            "temperature",
            "voltage",
            "electric_current",
            "power",
        )
    ],
    "zubax.telega.ServoCommand.1.0",
    *[
        f"zubax.physics.{kind}.{n}.1.0"
        for kind in ("kinematics", "dynamics")
        for n in ("DoF2nd", "DoF2ndTs", "DoF3rd", "DoF3rdTs")
    ],
    "zubax.Timestamp.1.0",
    "zubax.service.Readiness.1.0",
    "zubax.service.Health.1.0",
    "zubax.service.Heartbeat.1.0",
    "zubax.service.actuator.Feedback.1.0",
    "zubax.service.actuator.Status.1.0",
    "zubax.service.actuator.FaultFlags.1.0",
    *[
        f"reg.udral.physics.{n}.0.1"
        for n in (
            "dynamics.rotation.Planar",
            "dynamics.rotation.PlanarTs",
            "dynamics.translation.Linear",
            "dynamics.translation.LinearTs",
            "kinematics.rotation.Planar",
            "kinematics.rotation.PlanarTs",
            "kinematics.translation.Linear",
            "kinematics.translation.LinearTs",
            "electricity.Power",
            "electricity.PowerTs",
        )
    ],
    *[
        f"reg.udral.service.{n}.0.1"
        for n in (
            "common.Readiness",
            "common.Heartbeat",
            "actuator.common.Feedback",
            "actuator.common.Status",
            "actuator.common.FaultFlags",
            *(f"actuator.common.sp.{v}" for v in ("Scalar", "Vector2", "Vector3", "Vector4", "Vector6", "Vector8",
                                                   "Vector31")),
        )
    ],
]

# Namespaces we carry in full: every reference type under these prefixes must exist in our tree too.
COMPLETE_NAMESPACES = (
    "uavcan.diagnostic.",
    "uavcan.node.",
    "uavcan.primitive.",
    "uavcan.register.",
    "uavcan.time.",
    "uavcan.pnp.",
)


def reference_dir() -> Path:
    env = os.environ.get("CYPHAL_SERVO_DSDL_REFERENCE")
    if env:
        return Path(env).expanduser().resolve()
    return REPO_ROOT.parent / "shared" / "dsdl-reference"


def reference_roots(ref: Path) -> dict[str, Path]:
    return {
        "uavcan": ref / "public_regulated_data_types" / "uavcan",
        "reg": ref / "public_regulated_data_types" / "reg",
        "zubax": ref / "zubax_dsdl" / "zubax",
    }


def type_key(t: pydsdl.CompositeType) -> str:
    return f"{t.full_name}.{t.version.major}.{t.version.minor}"


def _read_tree(roots: dict[str, Path]) -> dict[str, pydsdl.CompositeType]:
    out: dict[str, pydsdl.CompositeType] = {}
    for name, root in roots.items():
        lookup = [str(p) for n, p in roots.items() if n != name]
        for t in pydsdl.read_namespace(str(root), lookup, allow_unregulated_fixed_port_id=(name == "zubax")):
            out[type_key(t)] = t
    return out


@functools.cache
def our_types() -> dict[str, pydsdl.CompositeType]:
    return _read_tree({r: OUR_DSDL / r for r in ROOTS})


@functools.cache
def reference_types() -> dict[str, pydsdl.CompositeType]:
    return _read_tree(reference_roots(reference_dir()))


def _our_type_ids() -> list[str]:
    """Type keys derived from our file names, so collection does not need to parse anything."""
    ids = []
    for path in sorted(OUR_DSDL.rglob("*.dsdl")):
        parts = path.relative_to(OUR_DSDL).with_suffix("").parts
        stem = parts[-1].split(".")
        if stem[0].isdigit():
            stem = stem[1:]  # fixed port-ID prefix
        ids.append(".".join([*parts[:-1], *stem]))
    return ids


def _require_reference() -> None:
    ref = reference_dir()
    if not ref.is_dir():
        pytest.skip(f"DSDL reference folder not found at {ref} (set CYPHAL_SERVO_DSDL_REFERENCE to point at it)")


def _constant_value(c: pydsdl.Constant) -> str:
    return str(c.value.native_value)


def _bit_length_set(st: pydsdl.CompositeType) -> dict[str, Any]:
    bls = st.bit_length_set
    out: dict[str, Any] = {
        "min": bls.min,
        "max": bls.max,
        "fixed_length": bls.fixed_length,
        "residues mod 8": sorted(set(bls % 8)),
        "residues mod 32": sorted(set(bls % 32)),
    }
    if bls.max <= FULL_BLS_MAX_BITS:
        out["full set"] = frozenset(bls)
    return out


def _structure(st: pydsdl.CompositeType) -> dict[str, Any]:
    inner = st.inner_type if isinstance(st, pydsdl.DelimitedType) else st
    return {
        "sealed": not isinstance(st, pydsdl.DelimitedType),
        "extent": st.extent,
        "union": isinstance(inner, pydsdl.UnionType),
        "bit_length_set": _bit_length_set(st),
        "fields": [
            ("<padding>" if isinstance(f, pydsdl.PaddingField) else f.name, str(f.data_type)) for f in st.fields
        ],
        "constants": {c.name: (str(c.data_type), _constant_value(c)) for c in st.constants},
    }


def signature(t: pydsdl.CompositeType) -> dict[str, Any]:
    """Everything about a type that affects compatibility, as plain comparable data."""
    sig: dict[str, Any] = {
        "fixed_port_id": t.fixed_port_id,
        "deprecated": t.deprecated,
        "kind": "service" if isinstance(t, pydsdl.ServiceType) else "message",
    }
    if isinstance(t, pydsdl.ServiceType):
        sig["request"] = _structure(t.request_type)
        sig["response"] = _structure(t.response_type)
    else:
        sig["message"] = _structure(t)
    return sig


def diff(ours: Any, ref: Any, path: str = "") -> list[str]:
    """Human-readable list of every difference between two signatures."""
    if isinstance(ours, dict) and isinstance(ref, dict):
        out = []
        for k in list(ours) + [k for k in ref if k not in ours]:
            p = f"{path}.{k}" if path else str(k)
            if k not in ref:
                out.append(f"{p}: only in ours: {ours[k]!r}")
            elif k not in ours:
                out.append(f"{p}: missing in ours, reference has {ref[k]!r}")
            else:
                out += diff(ours[k], ref[k], p)
        return out
    if isinstance(ours, list) and isinstance(ref, list) and path.endswith(".fields"):
        out = []
        for i in range(max(len(ours), len(ref))):
            a = ours[i] if i < len(ours) else None
            b = ref[i] if i < len(ref) else None
            if a != b:
                out.append(f"{path}[{i}]: ours {a!r}, reference {b!r}")
        return out
    if isinstance(ours, frozenset) and isinstance(ref, frozenset) and ours != ref:
        return [f"{path}: only in ours {sorted(ours - ref)}, only in reference {sorted(ref - ours)}"]
    if ours != ref:
        return [f"{path}: ours {ours!r}, reference {ref!r}"]
    return []


@pytest.mark.parametrize("type_id", _our_type_ids())
def test_matches_reference(type_id: str) -> None:
    _require_reference()
    ours = our_types()
    assert type_id in ours, f"{type_id}: file name does not match the type pydsdl compiled"
    refs = reference_types()
    assert type_id in refs, f"{type_id}: no type with this full name and version in the reference"
    problems = diff(signature(ours[type_id]), signature(refs[type_id]))
    if problems:
        pytest.fail(f"{type_id} differs from the reference:\n  " + "\n  ".join(problems), pytrace=False)


def test_required_types_present() -> None:
    missing = sorted(set(REQUIRED_TYPES) - set(our_types()))
    assert not missing, "required types missing from cyphal_common/dsdl/:\n  " + "\n  ".join(missing)


def test_complete_namespaces() -> None:
    _require_reference()
    ours = set(our_types())
    missing = sorted(k for k in reference_types() if k.startswith(COMPLETE_NAMESPACES) and k not in ours)
    assert not missing, "types in fully-carried namespaces missing from cyphal_common/dsdl/:\n  " + "\n  ".join(missing)


def test_dependencies_are_local() -> None:
    """Each root compiles with only our own roots as lookup directories (checked by our_types())."""
    assert {t.root_namespace for t in our_types().values()} == set(ROOTS)


def test_root_namespaces_are_only_the_dsdl_folders(tmp_path: Path) -> None:
    """The DSDL folder is also a Python package: ``__pycache__``, ``__init__.py`` and strays are not namespaces."""
    assert [p.name for p in root_namespace_dirs(OUR_DSDL)] == sorted(ROOTS)
    (tmp_path / "uavcan" / "node").mkdir(parents=True)
    (tmp_path / "uavcan" / "node" / "Health.1.0.dsdl").write_text("uint2 value\n@sealed\n")
    for stray in ("__pycache__", ".git", "empty", "not-an-identifier"):
        (tmp_path / stray).mkdir()
    (tmp_path / "not-an-identifier" / "X.1.0.dsdl").write_text("@sealed\n")
    (tmp_path / "__init__.py").write_text("")
    assert [p.name for p in root_namespace_dirs(tmp_path)] == ["uavcan"]


def test_compiles_with_pycyphal(tmp_path: Path) -> None:
    """Generate Python packages from our tree and import a type from each root in a clean interpreter."""
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        import pycyphal.dsdl
        src, out = Path(sys.argv[1]), Path(sys.argv[2])
        pycyphal.dsdl.compile_all([src / r for r in ("uavcan", "reg", "zubax")], out)
        sys.path.insert(0, str(out))
        from uavcan.node import Heartbeat_1_0
        from zubax.telega import ServoCommand_1_0
        from reg.udral.physics.dynamics.rotation import Planar_0_1
        import pycyphal.dsdl as d
        hb = Heartbeat_1_0(uptime=7)
        assert d.deserialize(Heartbeat_1_0, list(d.serialize(hb))).uptime == 7
        cmd = ServoCommand_1_0(profile_jerk=3.0)
        assert d.deserialize(ServoCommand_1_0, list(d.serialize(cmd))).profile_jerk == 3.0
        Planar_0_1()
        for m in (Heartbeat_1_0, ServoCommand_1_0, Planar_0_1):
            assert str(Path(sys.modules[m.__module__].__file__)).startswith(str(out)), m
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CYPHAL_PATH", "PYCYPHAL_PATH")}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(OUR_DSDL), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
