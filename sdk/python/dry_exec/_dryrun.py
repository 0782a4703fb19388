"""@dry_run: run a Python function in a trial, with what it sees on the host.

The trial is a separate process (this interpreter, behind the isolation
boundary), so the function cannot take its module along as objects. What it
references is carried over as source:

- modules it uses (``import x``, ``import x.y as z``) are imported again;
- functions and classes imported from elsewhere are imported again
  (``from mod import name``); those defined in the caller's own code travel
  as their source, with what *they* reference, recursively;
- other values (globals and closure cells) travel as Python literals: None,
  bools, numbers, str, bytes, lists, tuples, dicts, sets, pathlib paths, and
  dates, times, Decimals, UUIDs and Fractions.

Anything else (an open connection, a lock, an instance of your own class…)
cannot cross the boundary: the call raises NotRepresentable naming it, before
any trial runs. A name the function uses that is not defined anywhere stays
undefined, as it would on the host: the trial's NameError comes back as an
error on the delta.

Nothing is pickled, ever: the trial must not run code the caller did not
write in plain sight.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import datetime
import decimal
import dis
import fractions
import functools
import inspect
import json
import math
import pathlib
import secrets
import sys
import textwrap
import types
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ._errors import BadRequest, DryExecError, NotRepresentable
from ._types import StateDelta


class TrialFunctionError(DryExecError):
    """The function raised inside the trial. ``type`` and ``message`` are the
    exception's, ``traceback`` the trial's traceback text (file names and line
    numbers are the function's own). Raised by ``delta.return_value`` and
    ``delta.raise_for_error()`` of a @dry_run delta whose function raised."""

    code = "function_raised"

    def __init__(self, type_name: str, message: str, traceback: str = "", function: str = "") -> None:
        super().__init__("%s raised in the trial: %s: %s" % (function or "the function", type_name, message))
        self.type = type_name
        self.exc_message = message
        self.traceback = traceback
        self.function = function


class TrialFunctionWarning(RuntimeWarning):
    """Warned when a @dry_run function raised inside the trial, so that a
    caller who looks only at the delta's numbers still sees it."""


@dataclass(repr=False, eq=False)
class FunctionDelta(StateDelta):
    """The StateDelta of a @dry_run call. Besides the trial's delta:

    - ``error``: "Type: message" if the function raised in the trial, else None;
    - ``exception``: the same as a TrialFunctionError (with the traceback);
    - ``ok``: the function returned (no exception, exit 0);
    - ``return_value``: what it returned (JSON-decoded; repr() if it is not
      JSON). Reading it when the function raised raises TrialFunctionError:
      a failed call cannot pass for one that returned None.
    """

    exception: Optional[TrialFunctionError] = field(default=None, repr=False)
    #: True when the return value was not JSON and is its repr().
    return_repr: bool = False

    @property  # type: ignore[override]
    def return_value(self) -> Any:
        if self.exception is not None:
            raise self.exception
        return self.__dict__.get("_return_value")

    @return_value.setter
    def return_value(self, v: Any) -> None:
        # The dataclass __init__ of StateDelta assigns the field.
        if isinstance(v, property):
            v = None
        self.__dict__["_return_value"] = v

    def __repr__(self) -> str:
        # Not the generated repr: it would read return_value, which raises.
        return "FunctionDelta(trial_id=%r, decision=%r, exit_code=%d, error=%r, files=%d)" % (
            self.trial_id, self.decision.choice, self.exit_code, self.error, len(self.files))

    @property
    def ok(self) -> bool:
        return self.exception is None and self.error is None and self.exit_code == 0

    def raise_for_error(self) -> "FunctionDelta":
        """Raises TrialFunctionError if the function raised (or did not
        finish); returns the delta otherwise."""
        if self.exception is not None:
            raise self.exception
        if self.error is not None:
            raise TrialFunctionError("DidNotFinish", self.error)
        return self


# ---------------------------------------------------------------- values

_VALUE_TYPES = (datetime.date, datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal, uuid.UUID,
                fractions.Fraction)
# The modules values are written with, under names no user code has: the
# runner binds them before any value is defined.
_VALUE_MODULES = {"_dx_datetime": "datetime", "_dx_decimal": "decimal", "_dx_uuid": "uuid",
                  "_dx_fractions": "fractions", "_dx_pathlib": "pathlib"}
_EVAL_NS = {"_dx_datetime": datetime, "_dx_decimal": decimal, "_dx_uuid": uuid, "_dx_fractions": fractions,
            "_dx_pathlib": pathlib}


def _literal(v: Any, where: str, depth: int = 0) -> str:
    """Python source that evaluates to v in the trial, or NotRepresentable."""
    if depth > 100:
        raise NotRepresentable("%s is nested more than 100 deep" % where)
    if v is None or isinstance(v, (bool, int, str, bytes)) and type(v) in (bool, int, str, bytes):
        return repr(v)
    if type(v) is float:
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    if type(v) is bytearray:
        return "bytearray(%r)" % bytes(v)
    if type(v) is complex:
        return "complex(%r, %r)" % (v.real, v.imag)
    if type(v) in (list, tuple, set, frozenset):
        items = [_literal(x, "%s[%d]" % (where, i), depth + 1) for i, x in enumerate(v)]
        if type(v) is list:
            return "[" + ", ".join(items) + "]"
        if type(v) is tuple:
            return "(" + "".join(x + ", " for x in items) + ")"
        return "%s([%s])" % (type(v).__name__, ", ".join(items))
    if type(v) is dict:
        return "{" + ", ".join("%s: %s" % (_literal(k, "%s key" % where, depth + 1),
                                           _literal(x, "%s[%r]" % (where, k), depth + 1)) for k, x in v.items()) + "}"
    if isinstance(v, pathlib.PurePath) and type(v).__module__ == "pathlib":
        return "_dx_pathlib.%s(%r)" % (type(v).__name__, str(v))
    if isinstance(v, _VALUE_TYPES):
        src = repr(v)
        mod = type(v).__module__
        if mod == "datetime":
            src = src.replace("datetime.", "_dx_datetime.")
        elif mod in ("decimal", "_pydecimal", "uuid", "fractions"):
            src = "_dx_%s.%s" % ("decimal" if mod == "_pydecimal" else mod, src)
        try:
            if eval(src, dict(_EVAL_NS)) == v:  # noqa: S307 - our own repr of a stdlib value type
                return src
        except Exception:  # noqa: BLE001 - any failure means "not representable"
            pass
    raise NotRepresentable("%s is a %s.%s, which cannot be sent into the trial (only literals — None, bools, "
                           "numbers, str, bytes, lists, tuples, dicts, sets — pathlib paths, dates, Decimals, UUIDs, "
                           "modules, and functions and classes with source can): create it inside the function, or "
                           "pass what it is made from" % (where, type(v).__module__, type(v).__qualname__))


# ---------------------------------------------------------------- code

def _source_of(obj: Any, what: str) -> Tuple[str, str, int]:
    """(dedented source, file name, first line) of a function or class."""
    try:
        lines, first = inspect.getsourcelines(obj)
        fname = inspect.getsourcefile(obj) or inspect.getfile(obj)
    except (OSError, TypeError) as e:
        raise NotRepresentable("@dry_run needs the source of %s, and Python has none (%s): define it in a file"
                               % (what, e)) from None
    return textwrap.dedent("".join(lines)), fname, max(first, 1)


def _strip_decorators(src: str, what: str) -> Tuple[str, int]:
    """src from its def line on, and how many lines were dropped: in the trial
    the function is defined bare (its @dry_run would start another trial)."""
    lines = src.splitlines()
    i = 0
    while i < len(lines) and not lines[i].lstrip().startswith(("def ", "async def ")):
        i += 1
    if i == len(lines):
        raise BadRequest("@dry_run: cannot find the def of %s (a lambda has no def: use a def)" % what)
    return "\n".join(lines[i:]) + "\n", i


def _names_loaded(code: types.CodeType) -> Set[str]:
    """The global (and class-body) names code loads, nested code included."""
    out: Set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL") and isinstance(ins.argval, str):
            out.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names_loaded(c)
    return out


def _defined_at_top(tree: ast.Module) -> Set[str]:
    out: Set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
    return out


def _importable(obj: Any) -> Optional[str]:
    """`from mod import name` source that gives obj back, if obj lives in a
    module other than __main__ that imports as itself."""
    mod = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None)
    if not mod or not qual or mod == "__main__" or "<" in qual:
        return None
    m = sys.modules.get(mod)
    if m is None or getattr(m, "__spec__", None) is None:
        return None
    target: Any = m
    for part in qual.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    if target is not obj:
        return None
    return mod


def _module_import(m: types.ModuleType, name: str) -> str:
    spec = getattr(m, "__spec__", None)
    real = m.__name__
    if spec is None or real == "__main__":
        raise NotRepresentable("module %r (global %s) was not imported by name and cannot be imported in the trial"
                               % (real, name))
    if real == name:
        return "import %s\n" % real
    if "." in real and real.split(".")[0] == name:
        return "import %s\n" % real
    return "import %s as %s\n" % (real, name)


class _Capture:
    """Walks what a function references and writes the trial's prelude."""

    def __init__(self, fn: Callable[..., Any], own_module: Optional[str]) -> None:
        self.root = fn
        self.own_module = own_module
        self.pieces: List[Tuple[str, str]] = []  # (file name, source), in order
        self.done: Set[str] = set()
        self.busy: Set[str] = set()

    def add(self, fname: str, src: str) -> None:
        self.pieces.append((fname, src))

    def code_piece(self, obj: Any, name: str, strip: bool) -> Tuple[str, str, Set[str]]:
        """(file, padded source, names it loads) of a function or class."""
        src, fname, first = _source_of(obj, name)
        dropped = 0
        if strip:
            src, dropped = _strip_decorators(src, name)
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            raise NotRepresentable("@dry_run: the source of %s does not parse on its own (%s)" % (name, e)) from None
        # Padding keeps the trial's line numbers (tracebacks) the file's own.
        padded = "\n" * (first - 1 + dropped) + src
        names = _names_loaded(compile(tree, fname, "exec")) - _defined_at_top(tree)
        return fname, padded, names

    def resolve(self, name: str, scope: Dict[str, Any], closure: Dict[str, Any], where: str) -> None:
        """Makes name defined in the trial as it is for the code that uses it."""
        if name in self.done or name in self.busy:
            return
        if name in closure:
            value, kind = closure[name], "closure variable"
        elif name in scope:
            value, kind = scope[name], "global"
        else:
            self.done.add(name)  # a builtin, or undefined (the trial says so, as the host would)
            return
        if name in vars(builtins) and value is vars(builtins)[name]:
            self.done.add(name)
            return
        self.busy.add(name)
        try:
            self._define(name, value, "%s %s of %s" % (kind, name, where))
        finally:
            self.busy.discard(name)
        self.done.add(name)

    def _define(self, name: str, value: Any, what: str) -> None:
        if isinstance(value, types.ModuleType):
            self.add("<imports>", _module_import(value, name))
            return
        if isinstance(value, (types.FunctionType, type)) or (callable(value) and hasattr(value, "__wrapped__")):
            inner = inspect.unwrap(value) if isinstance(value, types.FunctionType) else value
            # Defined by the caller's own code: carried as source. Anything
            # else that imports as itself (a library) is imported again.
            mod = _importable(value)
            own = getattr(inner, "__module__", None) in (self.own_module, "__main__")
            if mod is not None and not own:
                self.add("<imports>", "from %s import %s as %s\n" % (mod, value.__qualname__, name)
                         if value.__qualname__ != name else "from %s import %s\n" % (mod, name))
                return
            if isinstance(inner, types.FunctionType):
                if inner.__name__ == "<lambda>":
                    raise NotRepresentable("%s is a lambda, which @dry_run cannot carry: make it a def" % what)
                self.function(inner, name)
                return
            if isinstance(inner, type):
                fname, src, names = self.code_piece(inner, name, strip=False)
                g = vars(sys.modules[inner.__module__]) if inner.__module__ in sys.modules else {}
                for n in sorted(names):
                    self.resolve(n, g, {}, name)
                if inner.__name__ != name:
                    src += "%s = %s\n" % (name, inner.__name__)
                self.add(fname, src)
                return
        if callable(value) and not isinstance(value, type):
            mod = _importable(value)
            if mod is not None:  # a builtin function or a C function of a library
                self.add("<imports>", "from %s import %s as %s\n" % (mod, value.__qualname__, name))
                return
        self.add("<values>", "%s = %s\n" % (name, _literal(value, what)))

    def function(self, fn: types.FunctionType, name: str) -> None:
        fname, src, names = self.code_piece(fn, name, strip=True)
        closure: Dict[str, Any] = {}
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                closure[var] = cell.cell_contents
            except ValueError:  # an empty cell: undefined, as on the host
                pass
        # A closure variable is a free name of the def's source too (it is
        # not defined in it): the trial defines it as a global.
        for n in sorted(names | set(closure)):
            self.resolve(n, fn.__globals__, closure, fn.__qualname__)
        if fn.__name__ != name:
            src += "%s = %s\n" % (name, fn.__name__)
        self.add(fname, src)


def capture(fn: Callable[..., Any]) -> List[Tuple[str, str]]:
    """The (file name, source) pieces that define fn, and what it references,
    in the trial; raises NotRepresentable for what cannot be carried."""
    inner = inspect.unwrap(fn)
    if not isinstance(inner, types.FunctionType):
        raise NotRepresentable("@dry_run wraps Python functions (def), not %s" % type(inner).__name__)
    c = _Capture(inner, inner.__module__)
    c.busy.add(inner.__name__)
    c.function(inner, inner.__name__)
    return c.pieces


# ---------------------------------------------------------------- the runner

_RUNNER = """\
import json as _dx_json, sys as _dx_sys, traceback as _dx_tb
_dx_path = _dx_json.loads({path!r})
if _dx_path is not None:
    _dx_sys.path[:] = _dx_path
_dx_g = {{"__name__": "__dry_run__", "__builtins__": __builtins__}}
_dx_g.update((_dx_k, __import__(_dx_m)) for _dx_k, _dx_m in {modules!r}.items())
_dx_pieces = _dx_json.loads({pieces!r})
try:
    for _dx_f, _dx_s in _dx_pieces:
        exec(compile(_dx_s, _dx_f, "exec"), _dx_g)
    exec(compile({call!r}, "<dry_run call>", "exec"), _dx_g)
    _dx_out = {{"ok": True, "value": _dx_g["_dx_value"]}}
except BaseException as _dx_e:
    _dx_text = "".join(_dx_tb.format_exception(type(_dx_e), _dx_e, _dx_e.__traceback__.tb_next))
    _dx_sys.stderr.write(_dx_text)
    _dx_out = {{"ok": False, "type": type(_dx_e).__name__, "message": str(_dx_e), "traceback": _dx_text}}
try:
    _dx_line = _dx_json.dumps(_dx_out)
except (TypeError, ValueError):
    _dx_line = _dx_json.dumps({{"ok": True, "value": repr(_dx_out.get("value")), "repr": True}})
_dx_sys.stdout.flush()
_dx_sys.stdout.write("\\n{marker}" + _dx_line + "\\n")
_dx_sys.stdout.flush()
_dx_sys.exit(0 if _dx_out["ok"] else 1)
"""


def _script(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any], marker: str,
            same_python: bool = True) -> str:
    pieces = capture(fn)
    name = inspect.unwrap(fn).__name__
    call_args = [_literal(a, "argument %d of %s" % (i + 1, name)) for i, a in enumerate(args)]
    call_args += ["%s=%s" % (k, _literal(v, "argument %s of %s" % (k, name))) for k, v in kwargs.items()]
    call = "%s(%s)" % (name, ", ".join(call_args))
    if inspect.iscoroutinefunction(inspect.unwrap(fn)):
        call = "import asyncio as _dx_asyncio\n_dx_value = _dx_asyncio.run(%s)\n" % call
    else:
        call = "_dx_value = %s\n" % call
    # The caller's interpreter imports what the caller imports; another one
    # (python=) keeps its own path.
    path = list(sys.path) if same_python else None
    return _RUNNER.format(path=json.dumps(path), modules=_VALUE_MODULES, pieces=json.dumps(pieces), call=call, marker=marker)


def dry_run(fn: Optional[Callable[..., Any]] = None, *, environment: Any = None, timeout: Optional[float] = None,
            python: Optional[str] = None, client: Any = None, raise_errors: bool = False) -> Any:
    """Decorator: calling the function runs it, with those arguments, in a
    Python trial (this interpreter, or ``python``) and returns a
    FunctionDelta (a StateDelta with ``return_value``, ``error``,
    ``exception`` and ``ok``).

    What the function references travels with it (see the module's doc:
    modules, functions and classes as source or imports, values as
    literals); what cannot raises NotRepresentable before any trial. If the
    function raises in the trial, the delta's ``error`` says so, reading
    ``return_value`` raises TrialFunctionError, and a TrialFunctionWarning is
    issued; ``raise_errors=True`` raises the TrialFunctionError from the call
    instead (the delta is its ``delta`` attribute)."""

    def wrap(f: Callable[..., Any]) -> Callable[..., FunctionDelta]:
        inner_fn = inspect.unwrap(f)
        if not isinstance(inner_fn, types.FunctionType):
            raise NotRepresentable("@dry_run wraps Python functions (def), not %s" % type(inner_fn).__name__)
        name = inner_fn.__qualname__

        @functools.wraps(f)
        def inner(*args: Any, **kwargs: Any) -> FunctionDelta:
            marker = "__dryexec_return_%s__" % secrets.token_hex(8)
            # Everything the trial needs is checked here, before it runs.
            script = _script(f, args, kwargs, marker, same_python=python is None)
            from ._client import default_client
            c = client or default_client()
            base = c.run([python or sys.executable or "python3", "-"], stdin=script, environment=environment,
                         timeout=timeout)
            delta = FunctionDelta(**{fl.name: getattr(base, fl.name) for fl in dataclasses.fields(StateDelta)})
            out = delta.process.stdout
            at = out.rfind("\n" + marker)
            res: Dict[str, Any] = {}
            if at >= 0:
                line = out[at + 1 + len(marker):].split("\n", 1)[0]
                delta.process.stdout = out[:at]
                try:
                    res = json.loads(line)
                except ValueError:
                    res = {}
            if res.get("ok"):
                delta.return_value = res.get("value")
                delta.return_repr = bool(res.get("repr"))
                return delta
            if res:
                delta.exception = TrialFunctionError(str(res.get("type")), str(res.get("message")),
                                                     str(res.get("traceback", "")), name)
                delta.error = "%s: %s" % (res.get("type"), res.get("message"))
            else:
                why = "timed out" if delta.timed_out else ("killed by %s" % delta.process.signal
                                                           if delta.process.signal else "exit %d" % delta.exit_code)
                delta.error = "the function did not finish (%s)" % why
                delta.exception = TrialFunctionError("DidNotFinish", delta.error, delta.stderr[-4000:], name)
            delta.exception.delta = delta  # type: ignore[attr-defined]
            if raise_errors:
                raise delta.exception
            warnings.warn("@dry_run %s: %s (trial %s; the delta's .error, .exception)"
                          % (name, delta.exception.message, delta.trial_id), TrialFunctionWarning, stacklevel=2)
            return delta

        return inner

    if fn is not None:
        return wrap(fn)
    return wrap
