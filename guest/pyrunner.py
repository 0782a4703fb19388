# dryexec exec_python runner. The session guest (guest/python_unix.go) embeds
# this file and starts it, one process per exec_python, as
#
#     python3 -B -u -c <this source>
#
# in the session's shell environment, in "/" (or the shell's cwd when a relative
# PYTHONPATH-like variable makes startup depend on it), in its own process
# group, with stdin /dev/null, stdout and stderr going to the transcript, and two
# pipes:
#
#     fd 3: runner -> guest        fd 4: guest -> runner
#
# Usually it is started ahead of its call (pre-started, see docs/architecture.md
# "Sessions"): it imports what it needs, says it is ready, and waits for its one
# request; the cwd comes with the request.
#
# Protocol. Every message is one line of JSON (ASCII only: json.dumps escapes
# the rest, so a line never holds a raw newline), followed, when the line has
# "nbytes": N, by exactly N raw bytes. The runner writes one message first, as
# soon as it is up:
#
#     {"op": "ready", "present": [path, ...], "absent": [path, ...]}
#
# naming every file and directory its startup depended on (sys.path entries,
# site directories and .pth files, the files of the modules loaded so far, the
# interpreter), as it found them (present or absent), so that the guest can
# tell whether a call may still use it. The
# guest then writes one message:
#
#     {"code": str, "inputs": {name: Value}, "workspace": str, "cwd": str,
#      "setenv": {name: str}, "unsetenv": [name],  (PWD, OLDPWD: see shellDirVars)
#      "host_objects": [name],  (bound as globals of their own name too)
#      "limits": {"entry": n, "entries": n, "total": n, "outputs": n, "line": n,
#                 "value": n}}
#
# and after that only replies. The runner writes, until the last message:
#
#   one-way:
#     {"op": "print", "kind": "" | "echo", "type": "str,int", "len": n, "text": str,
#      "truncated": b, "objects": [{"type": t, "repr": s, "truncated": b, "len": n | null}]}
#                                  ("echo": the value of a final bare expression)
#     {"op": "drop"}               a print past the caps (the guest counts them)
#   requests, each answered by exactly one reply before the runner writes again:
#     {"op": "cache.get", "key": k}          -> {"ok": true, "found": b, "kind": "" | "pickle", "nbytes": n} + value
#     {"op": "cache.has", "key": k}          -> {"ok": true, "found": b}
#     {"op": "cache.keys"}                   -> {"ok": true, "keys": [k, ...]}
#     {"op": "cache.set", "key": k, "kind": "" | "pickle", "nbytes": n} + value -> {"ok": true}
#     {"op": "cache.del", "key": k}          -> {"ok": true, "found": b}
#     {"op": "emit", "name": s, "value": Value}                   -> {"ok": true}
#     {"op": "hostcall", "object": s, "method": s, "args": [Value], "kwargs": {name: Value}}
#                                                                -> {"ok": true, "value": Value}
#     or a refusal {"ok": false, "code": c, "message": m}, raised here as the
#     exception _EXCEPTIONS names for c (permission, read_only: PermissionError;
#     type: TypeError; limit: OSError; anything else, e.g. host_error:
#     RuntimeError).
#   last:
#     {"op": "result", "ok": b, "error": {"type", "message", "traceback"} | null,
#      "outputs": {name: Value}, "outputs_skipped": {name: type}}
#   and then the runner exits at once (os._exit: no atexit, no waiting for
#   threads).
#
# Value is wire.Value's JSON: {"type": "json", "json": any} | {"type": "bytes",
# "bytes": base64} | {"type": "file", "path": str}. Nothing else crosses the
# boundary as a value. The one pickle is the cache's: a value that is neither
# bytes nor str is pickled here and stored on the host with kind "pickle" as
# opaque bytes; only this side (the sandbox, which runs any code anyway)
# ever unpickles it.
#
# The user's code runs in this process and can write anything to fd 3: the
# guest trusts nothing here, bounds every line and payload, and applies the
# print caps again.

# Imports are few and cheap (the interpreter starts once per exec): pathlib,
# traceback and linecache are loaded only when needed, the AST comes from
# compile() and base64 from binascii.
import sys

# python -c puts "" (the cwd) first on sys.path. The runner's own imports must
# not depend on where it was started (nor pick up a json.py lying in the
# user's cwd): "" is taken out here and put back just before the user's code.
_path0 = None
if sys.path and sys.path[0] == "" and not getattr(sys.flags, "safe_path", False):
    _path0 = sys.path.pop(0)

import _ast
import _thread
import binascii
import builtins
import json
import math
import os

_exit = os._exit
_write = os.write
_dumps = json.dumps
_FILENAME = "<exec>"
_MISSING = object()
_EXCEPTIONS = {
    "permission": PermissionError,
    "read_only": PermissionError,
    "type": TypeError,
    "value": ValueError,
    "not_found": KeyError,
    "limit": OSError,
}


class _Unrepresentable(Exception):
    pass


class _Channel:
    """The pipes to the guest; one lock keeps messages whole and replies paired."""

    def __init__(self):
        os.set_inheritable(3, False)
        os.set_inheritable(4, False)
        self._r = open(4, "rb")
        self._lock = _thread.RLock()

    def _send(self, msg, payload=None):
        data = _dumps(msg, separators=(",", ":"), allow_nan=False).encode("ascii") + b"\n"
        if len(data) > _line_max:
            raise ValueError("dryexec: a message of %d bytes is more than the %d the guest accepts" % (len(data), _line_max))
        for chunk in (data, payload):
            if chunk:
                view = memoryview(chunk)
                while view:
                    view = view[_write(3, view):]

    def send(self, msg, payload=None):
        with self._lock:
            self._send(msg, payload)

    def send_line(self, line):
        with self._lock:
            view = memoryview(line.encode("ascii") + b"\n")
            while view:
                view = view[_write(3, view):]

    def first(self):
        line = self._r.readline()
        if not line:
            # The guest went away (or dropped this pre-started runner) before
            # sending a request: nothing to report.
            _exit(0)
        return json.loads(line)

    def request(self, msg, payload=None):
        with self._lock:
            self._send(msg, payload)
            line = self._r.readline()
            if not line:
                raise ConnectionError("dryexec: the guest closed the channel")
            rep = json.loads(line)
            data = b""
            n = rep.get("nbytes") or 0
            if n:
                data = self._r.read(n)
                if len(data) != n:
                    raise ConnectionError("dryexec: short reply from the guest")
        if not rep.get("ok"):
            exc = _EXCEPTIONS.get(rep.get("code"), RuntimeError)
            raise exc(rep.get("message") or "refused")
        return rep, data


_chan = None
_ws = "/"
_line_max = 32 << 20
_value_max = 64 << 20


# ---- the value codec ----

def _check_json(v, depth=0):
    if depth > 200:
        raise _Unrepresentable("nested too deeply")
    if v is None or isinstance(v, (bool, str, int)):
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _Unrepresentable("float %r" % v)
        return
    if isinstance(v, (list, tuple)):
        for x in v:
            _check_json(x, depth + 1)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise _Unrepresentable("dict key of type %s" % type(k).__name__)
            _check_json(x, depth + 1)
        return
    raise _Unrepresentable(type(v).__name__)


def _file_path(p):
    a = os.path.abspath(os.fspath(p))
    ws = _ws.rstrip("/") or "/"
    if a == ws:
        return "."
    prefix = ws if ws.endswith("/") else ws + "/"
    if a.startswith(prefix):
        return a[len(prefix):]
    return a


def _encode(v):
    """v as a Value; _Unrepresentable when the codec has no tag for it."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"type": "bytes", "bytes": binascii.b2a_base64(bytes(v), newline=False).decode("ascii")}
    # Only a module that imported pathlib can hold a path.
    pathlib = sys.modules.get("pathlib")
    if pathlib is not None and isinstance(v, pathlib.PurePath):
        return {"type": "file", "path": _file_path(v)}
    _check_json(v)
    return {"type": "json", "json": v}


def _encode_or_type_error(v, what):
    try:
        return _encode(v)
    except _Unrepresentable as e:
        raise TypeError("%s: %s cannot cross to the host (json, bytes or pathlib.Path only)" % (what, e)) from None


def _decode(v):
    if not isinstance(v, dict):
        raise ValueError("not a Value: %r" % (v,))
    t = v.get("type")
    if t == "json":
        return v.get("json")
    if t == "bytes":
        return binascii.a2b_base64(v.get("bytes") or "")
    if t == "file":
        import pathlib
        p = v.get("path") or ""
        return pathlib.Path(p if os.path.isabs(p) else os.path.join(_ws, p))
    raise ValueError("unknown Value type %r" % (t,))


# ---- print ----

class _Printer:
    def __init__(self, limits):
        self.entry = int(limits.get("entry", 64 << 10))
        self.entries = int(limits.get("entries", 1000))
        self.total = int(limits.get("total", 1 << 20))
        self.count = 0
        self.used = 0

    def record(self, args, text, kind=""):
        try:
            b = text.encode("utf-8", "surrogateescape")
        except UnicodeError:
            b = text.encode("utf-8", "replace")
        if self.count >= self.entries or self.used >= self.total:
            _chan.send({"op": "drop"})
            return
        keep = min(len(b), self.entry, self.total - self.used)
        truncated = keep < len(b)
        if truncated:
            while keep > 0 and (b[keep] & 0xC0) == 0x80:
                keep -= 1
        self.count += 1
        self.used += keep
        _chan.send({
            "op": "print",
            "kind": kind,
            "type": ",".join(type(a).__name__ for a in args),
            "len": len(b),
            "text": b[:keep].decode("utf-8", "replace"),
            "truncated": truncated,
            "objects": [_describe_object(a) for a in args[:_OBJECTS_MAX]],
        })


_OBJECTS_MAX = 32   # wire.MaxPrintObjects
_REPR_MAX = 1024    # wire.PrintReprMax (bytes of UTF-8)


def _describe_object(a):
    """One printed object: its type, repr() clipped to _REPR_MAX bytes, and
    len() when it has one (a list's items, not its text's bytes)."""
    try:
        r = repr(a)
    except Exception as e:
        r = "<repr failed: %s>" % type(e).__name__
    b = r.encode("utf-8", "replace")
    truncated = len(b) > _REPR_MAX
    if truncated:
        r = b[:_REPR_MAX].decode("utf-8", "ignore")
    n = None
    if hasattr(type(a), "__len__"):
        try:
            n = len(a)
        except Exception:
            n = None
    return {"type": type(a).__name__, "repr": r, "truncated": truncated, "len": n}


_printer = None


def _print(*args, sep=" ", end="\n", file=None, flush=False):
    if sep is None:
        sep = " "
    if end is None:
        end = "\n"
    if not isinstance(sep, str):
        raise TypeError("sep must be None or a string, not %s" % type(sep).__name__)
    if not isinstance(end, str):
        raise TypeError("end must be None or a string, not %s" % type(end).__name__)
    f = sys.stdout if file is None else file
    if f is None:
        return
    text = sep.join(str(a) for a in args)
    f.write(text + end)
    if flush:
        f.flush()
    # Only what reaches the transcript is a print entry (not print(file=f), nor
    # a print under contextlib.redirect_stdout).
    if f is sys.__stdout__ or f is sys.__stderr__:
        _printer.record(args, text)


# ---- the injected helpers: cache, emit, host ----

def _check_key(key):
    if not isinstance(key, str):
        raise TypeError("cache keys are str, not %s" % type(key).__name__)


class Cache:
    """The session's cache: str keys; bytes values (a str is stored as UTF-8
    and read back as bytes), any other value pickled (here, in the sandbox)
    and unpickled here when read.

    Reads see this exec's own writes; writes and deletes reach the host only if
    the exec succeeds.
    """

    __slots__ = ()

    def get(self, key, default=None):
        _check_key(key)
        rep, data = _chan.request({"op": "cache.get", "key": key})
        if not rep.get("found"):
            return default
        if rep.get("kind") == "pickle":
            import pickle
            return pickle.loads(data)
        return data

    def __getitem__(self, key):
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __contains__(self, key):
        if not isinstance(key, str):
            return False
        rep, _ = _chan.request({"op": "cache.has", "key": key})
        return bool(rep.get("found"))

    def keys(self):
        rep, _ = _chan.request({"op": "cache.keys"})
        return list(rep.get("keys") or [])

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self.keys())

    def items(self):
        return [(k, self[k]) for k in self.keys()]

    def __setitem__(self, key, value):
        _check_key(key)
        kind = ""
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value)
        else:
            import pickle
            try:
                value = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:
                raise TypeError("cache values are bytes, str or values that pickle; %s does not: %s" % (type(value).__name__, e)) from None
            kind = "pickle"
        if len(value) > _value_max:
            raise ValueError("a cache value of %d bytes is more than the %d allowed" % (len(value), _value_max))
        _chan.request({"op": "cache.set", "key": key, "kind": kind, "nbytes": len(value)}, value)

    def __delitem__(self, key):
        _check_key(key)
        rep, _ = _chan.request({"op": "cache.del", "key": key})
        if not rep.get("found"):
            raise KeyError(key)

    def pop(self, key, default=_MISSING):
        v = self.get(key, _MISSING)
        if v is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        del self[key]
        return v

    def __repr__(self):
        return "<dryexec cache>"


def emit(name, value):
    """Sends an event (name, value) to the host, in order; value goes through the
    codec (json, bytes or pathlib.Path), anything else is a TypeError here."""
    if not isinstance(name, str):
        raise TypeError("emit: name must be str, not %s" % type(name).__name__)
    v = _encode_or_type_error(value, "emit(%r)" % name)
    _chan.request({"op": "emit", "name": name, "value": v})


class _HostMethod:
    __slots__ = ("_obj", "_name")

    def __init__(self, obj, name):
        self._obj, self._name = obj, name

    def __call__(self, *args, **kwargs):
        enc = [_encode_or_type_error(a, "%s.%s argument %d" % (self._obj, self._name, i + 1)) for i, a in enumerate(args)]
        msg = {"op": "hostcall", "object": self._obj, "method": self._name, "args": enc}
        if kwargs:
            # The host checks the names (identifiers, never private).
            msg["kwargs"] = {k: _encode_or_type_error(v, "%s.%s keyword %s" % (self._obj, self._name, k)) for k, v in kwargs.items()}
        rep, _ = _chan.request(msg)
        return _decode(rep.get("value") or {"type": "json"})

    def __repr__(self):
        return "<host method %s.%s>" % (self._obj, self._name)


class _HostProxy:
    """A host object, by name: its only power is calling the host's allowlisted
    methods (the host checks; this side knows nothing of the allowlist)."""

    __slots__ = ("_dx_name",)

    def __init__(self, name):
        object.__setattr__(self, "_dx_name", name)

    def __getattr__(self, method):
        if method.startswith("__") and method.endswith("__"):
            raise AttributeError(method)
        return _HostMethod(self._dx_name, method)

    def __setattr__(self, name, value):
        raise AttributeError("host objects are read-only proxies")

    def __repr__(self):
        return "<host object %s>" % self._dx_name


class Host:
    """host.get("db") or host.db: a proxy for the host object of that name."""

    __slots__ = ()

    def get(self, name):
        if not isinstance(name, str):
            raise TypeError("host object names are str, not %s" % type(name).__name__)
        return _HostProxy(name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _HostProxy(name)

    __getitem__ = get

    def __repr__(self):
        return "<dryexec host objects>"


# ---- running the code ----

_code = ""


def _run(code, g):
    global _code
    _code = code
    tree = compile(code, _FILENAME, "exec", _ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    exec(compile(tree, _FILENAME, "exec"), g)
    if last is not None:
        v = eval(compile(last, _FILENAME, "eval"), g)
        if v is not None:
            text = repr(v)
            sys.stdout.write(text + "\n")
            _printer.record((v,), text, "echo")


def _describe(e):
    import linecache
    import traceback
    linecache.cache[_FILENAME] = (len(_code), None, _code.splitlines(True), _FILENAME)
    tb = e.__traceback__
    # Drop the runner's own frames above the user's code.
    while tb is not None and tb.tb_frame.f_code.co_filename != _FILENAME:
        tb = tb.tb_next
    try:
        text = "".join(traceback.format_exception(type(e), e, tb))
    except Exception:
        text = ""
    try:
        msg = str(e)
    except Exception:
        msg = "<unprintable %s>" % type(e).__name__
    return {"type": type(e).__name__, "message": msg, "traceback": text}


class _C:
    def m(self):
        pass


_ModuleType = type(sys)
_FUNCTIONS = (type(_describe), type(len), type(_C().m), type([].append))


def _harvest(g, injected, limit):
    """Top-level bindings as (name -> encoded JSON text, name -> type name)."""
    outputs, skipped, used = {}, {}, 0
    for name, v in list(g.items()):
        if not isinstance(name, str) or name.startswith("_"):
            continue
        if name in injected and injected[name] is v:
            continue
        if isinstance(v, (_ModuleType, type) + _FUNCTIONS):
            continue
        functools = sys.modules.get("functools")
        if functools is not None and isinstance(v, functools.partial):
            continue
        tname = type(v).__name__
        try:
            text = _dumps(_encode(v), separators=(",", ":"), allow_nan=False)
        except (_Unrepresentable, ValueError, TypeError, RecursionError, OverflowError):
            skipped[name] = tname
            continue
        if used + len(text) > limit:
            skipped[name] = "%s (too large: %d bytes encoded)" % (tname, len(text))
            continue
        used += len(text)
        outputs[name] = text
    return outputs, skipped


def _result(ok, error, outputs, skipped):
    head = _dumps({"op": "result", "ok": ok, "error": error, "outputs_skipped": skipped}, separators=(",", ":"))
    parts = ",".join(_dumps(k) + ":" + t for k, t in outputs.items())
    return head[:-1] + ',"outputs":{' + parts + "}}"


def _deps():
    """(present, absent) paths: everything this interpreter's startup read or
    listed: a change to any of them (a package installed, a .pth file added, a
    PYTHONPATH directory created) means a fresh interpreter could start
    differently."""
    paths = [sys.executable]
    paths += [p for p in sys.path if p]
    site = sys.modules.get("site")
    if site is not None:
        try:
            if site.ENABLE_USER_SITE is not False:
                paths.append(site.getusersitepackages())
            dirs = list(site.getsitepackages())
        except Exception:
            dirs = []
        for d in dirs:
            paths.append(d)
            try:
                paths += [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".pth")]
            except OSError:
                pass
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str):
            paths.append(f)
    present, absent, seen = [], [], set()
    for p in paths:
        if not isinstance(p, str) or not os.path.isabs(p):
            continue
        for q in (p, os.path.realpath(p)):
            if q not in seen:
                seen.add(q)
                (present if os.path.lexists(q) else absent).append(q)
    return present, absent


def _main():
    global _chan, _ws, _printer, _line_max, _value_max
    _chan = _Channel()
    present, absent = _deps()
    _chan.send({"op": "ready", "present": present, "absent": absent})
    req = _chan.first()
    _ws = req.get("workspace") or "/"
    limits = req.get("limits") or {}
    _line_max = int(limits.get("line", _line_max))
    _value_max = int(limits.get("value", _value_max))
    _printer = _Printer(limits)
    mod = _ModuleType("__main__")
    g = mod.__dict__
    g["__builtins__"] = builtins
    sys.modules["__main__"] = mod
    sys.argv = [""]
    injected = {"cache": Cache(), "emit": emit, "host": Host()}
    names = req.get("host_objects") or ()
    if names:
        import keyword
    for name in names:
        # Each host object under its own name too (db.query(...)); the
        # helpers' own names and inputs (bound below) win.
        if isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and name not in injected:
            injected[name] = _HostProxy(name)
    g.update(injected)
    builtins.print = _print
    ok, error = True, None
    try:
        for k, v in (req.get("setenv") or {}).items():
            os.environ[k] = v
        for k in req.get("unsetenv") or ():
            os.environ.pop(k, None)
        cwd = req.get("cwd")
        if cwd:
            os.chdir(cwd)
        if _path0 is not None:
            sys.path.insert(0, _path0)
        # "" follows the cwd: after the code's own os.chdir, modules at the
        # workspace's root would stop importing. The root itself comes
        # right after it, as an absolute path.
        if req.get("workspace") and _ws not in sys.path:
            sys.path.insert(1 if _path0 is not None else 0, _ws)
        for name, v in (req.get("inputs") or {}).items():
            if not name.isidentifier():
                raise ValueError("input name %r is not a Python identifier" % name)
            g[name] = _decode(v)
        _run(req.get("code") or "", g)
    except SystemExit as e:
        if e.code not in (None, 0):
            ok, error = False, _describe(e)
    except BaseException as e:
        ok, error = False, _describe(e)
    try:
        outputs, skipped = _harvest(g, injected, int(limits.get("outputs", 16 << 20)))
    except BaseException as e:
        outputs, skipped = {}, {}
        if ok:
            ok, error = False, _describe(e)
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except Exception:
            pass
    _chan.send_line(_result(ok, error, outputs, skipped))
    _exit(0)

try:
    _main()
except BaseException:
    import traceback
    traceback.print_exc()
    _exit(70)
