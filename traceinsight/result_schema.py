"""The JSON Schema of ``diagnose --json`` and ``compare --json``, generated from the typed result
(``result.py``: the :class:`DiagnosisResult` dataclass, its :class:`Finding` and the TypedDict
sections; :class:`CompareResult`).

``python -m traceinsight.result_schema --schema > docs/result.schema.json`` writes it; a test checks
that the committed file is what this generates and that every sample's result validates.
Objects stay open (``additionalProperties`` is not set): readers must ignore unknown keys.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from typing import Any

from traceinsight import result as R

SCHEMA_ID = "https://traceinsight.invalid/result.schema.json"
_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def of(self, tp: Any) -> dict[str, Any]:
        """The schema of the Python type ``tp`` (definitions of named types go to ``$defs``)."""
        if tp is Any or tp is object:
            return {}
        if tp is type(None):
            return {"type": "null"}
        if tp in _PLAIN:
            if tp is float:  # JSON does not tell 1.0 from 1
                return {"type": "number"}
            return {"type": _PLAIN[tp]}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if origin is list:
            return {"type": "array", "items": self.of(args[0])} if args else {"type": "array"}
        if origin is dict:
            out: dict[str, Any] = {"type": "object"}
            if args and args[1] is not Any:
                out["additionalProperties"] = self.of(args[1])
            return out
        if tp is dict:
            return {"type": "object"}
        if _is_typeddict(tp) or dataclasses.is_dataclass(tp):
            return self.named(tp)
        raise TypeError(f"no JSON Schema for {tp!r}")

    def named(self, tp: Any) -> dict[str, Any]:
        name = tp.__name__
        if name not in self.defs:
            self.defs[name] = {}  # placeholder: recursive types
            hints = typing.get_type_hints(tp)
            if dataclasses.is_dataclass(tp):
                keys = [f.name for f in dataclasses.fields(tp)]
                # to_dict writes every field but those it leaves out when empty
                required = [k for k in keys if k not in getattr(tp, "OMITTED_WHEN_NONE", ())]
            else:
                keys = list(hints)
                required = [k for k in keys if k in tp.__required_keys__]
            body: dict[str, Any] = {"type": "object"}
            doc = (tp.__doc__ or "").strip()
            if doc and not doc.startswith(f"{name}("):  # a dataclass's generated signature
                body["description"] = " ".join(doc.split())
            body["properties"] = {k: self.of(hints[k]) for k in keys}
            if required:
                body["required"] = required
            self.defs[name] = body
        return {"$ref": f"#/$defs/{name}"}


def generate() -> dict[str, Any]:
    """The schema: a diagnosis result or a compare result, told apart by ``schema``."""
    b = _Builder()
    b.named(R.DiagnosisResult)
    diag = b.defs["DiagnosisResult"]
    props = {"schema": {"const": R.RESULT_SCHEMA}, "version": diag["properties"].pop("version")}
    props.update(diag["properties"])
    diag["properties"] = props
    diag["required"] = ["schema", *diag["required"]]
    b.named(R.CompareResult)
    b.defs["CompareResult"]["properties"]["schema"] = {"const": "traceinsight.compare"}
    b.defs["CompareResult"]["required"] = ["schema", "version"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "traceinsight diagnose --json / compare --json",
        "description": f"result version {R.RESULT_VERSION}; generated from traceinsight/result.py"
        " (python -m traceinsight.result_schema --schema)",
        "oneOf": [{"$ref": "#/$defs/DiagnosisResult"}, {"$ref": "#/$defs/CompareResult"}],
        "$defs": dict(sorted(b.defs.items())),
    }


def text() -> str:
    """The schema as committed in docs/result.schema.json."""
    return json.dumps(generate(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["--schema"]:
        print("usage: python -m traceinsight.result_schema --schema", file=sys.stderr)
        return 2
    sys.stdout.write(text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
