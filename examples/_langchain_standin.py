"""A minimal stand-in for `langchain_core.tools.tool`, used only when
LangChain is not installed (it cannot be installed where these examples are
tested). It follows LangChain's documented @tool interface and nothing more:

- ``@tool`` on a typed function with a docstring makes a tool whose ``name``
  is the function's name, ``description`` its docstring, and ``args`` the
  JSON-schema properties of its parameters;
- ``tool.invoke(input)`` takes a dict of arguments (or a str for a tool with
  one parameter) and returns what the function returns; ``tool.run`` too.

With LangChain installed, langchain_tool.py uses the real one.
"""

import inspect
from typing import Any, Callable, Dict

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


class StandInTool:
    def __init__(self, fn: Callable[..., Any]) -> None:
        if not fn.__doc__:
            raise ValueError("Function must have a docstring if description not provided.")  # as LangChain says
        self.func = fn
        self.name = fn.__name__
        self.description = inspect.cleandoc(fn.__doc__)
        self._sig = inspect.signature(fn)
        self.args: Dict[str, Dict[str, str]] = {
            p.name: {"title": p.name.replace("_", " ").title(), "type": _JSON_TYPES.get(p.annotation, "string")}
            for p in self._sig.parameters.values()}

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        if isinstance(input, str):
            if len(self.args) != 1:
                raise ValueError("a str input needs a tool with one argument")
            input = {next(iter(self.args)): input}
        bound = self._sig.bind(**input)
        return self.func(*bound.args, **bound.kwargs)

    run = invoke


def tool(fn: Callable[..., Any]) -> StandInTool:
    return StandInTool(fn)
