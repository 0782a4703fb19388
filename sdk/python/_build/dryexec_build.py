"""A PEP 517 build backend for the dry-exec SDK using the standard library only.

pip's build isolation would otherwise download setuptools, which machines
without PyPI access cannot do. The package is pure Python: a wheel is a zip of
dry_exec/ plus the dist-info files, which is all this writes.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "dry_exec"
DIST = "dry_exec"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"

METADATA = """Metadata-Version: 2.1
Name: dry-exec
Version: {v}
Summary: Python SDK for dryexec: ephemeral trials and sessions behind a real isolation boundary
Requires-Python: >=3.9
""".format(v=VERSION)

WHEEL = """Wheel-Version: 1.0
Generator: dryexec_build
Root-Is-Purelib: true
Tag: {t}
""".format(t=TAG)


def _files():
    pkg = os.path.join(ROOT, NAME)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, f)
            yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def _write_wheel(wheel_directory, entries):
    distinfo = "%s-%s.dist-info" % (DIST, VERSION)
    name = "%s-%s-%s.whl" % (DIST, VERSION, TAG)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries + [(distinfo + "/METADATA", METADATA.encode()), (distinfo + "/WHEEL", WHEEL.encode())]:
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        records.append(distinfo + "/RECORD,,")
        z.writestr(distinfo + "/RECORD", "\n".join(records) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for full, arc in _files():
        with open(full, "rb") as f:
            entries.append((arc, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(DIST + "_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (DIST, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "_build/dryexec_build.py"]:
            t.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        for full, arc in _files():
            t.add(full, arcname=base + "/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
