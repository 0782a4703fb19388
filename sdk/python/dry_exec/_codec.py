"""The tagged json/bytes/file codec every value crossing the boundary uses.
Nothing is pickled: a value that is not JSON, bytes or a path is refused."""

from __future__ import annotations

import base64
import json
import math
import pathlib
from typing import Any, Dict

from ._errors import NotRepresentable


def _check_json(v: Any, where: str, depth: int = 0) -> None:
    if depth > 100:
        raise NotRepresentable("%s: nested more than 100 deep" % where)
    if v is None or isinstance(v, (bool, int, str)):
        return
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise NotRepresentable("%s: %r is not a JSON number" % (where, v))
        return
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_json(x, "%s[%d]" % (where, i), depth + 1)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise NotRepresentable("%s: dict key %r is not a str" % (where, k))
            _check_json(x, "%s[%r]" % (where, k), depth + 1)
        return
    raise NotRepresentable("%s: a %s cannot cross the boundary (json values, bytes or pathlib paths only)"
                           % (where, type(v).__name__))


def encode(v: Any, where: str = "value") -> Dict[str, Any]:
    """v as a codec value."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"type": "bytes", "bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, pathlib.PurePath):
        return {"type": "file", "path": v.as_posix()}
    _check_json(v, where)
    return {"type": "json", "json": v}


def decode(v: Dict[str, Any]) -> Any:
    """A codec value as Python: JSON values, bytes, or pathlib.PurePosixPath."""
    t = v.get("type")
    if t == "bytes":
        return base64.b64decode(v.get("bytes") or "")
    if t == "file":
        return pathlib.PurePosixPath(v.get("path", ""))
    if t == "json":
        return v.get("json")
    raise NotRepresentable("unknown codec type %r" % (t,))


def dumps(v: Any) -> bytes:
    return json.dumps(v, separators=(",", ":")).encode("utf-8")
