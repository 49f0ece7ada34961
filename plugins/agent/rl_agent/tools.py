"""Tools: a name, an OpenAI-style JSON schema, and a function; calling one never crashes a rollout.

Where tools come from (``rollout.multi_turn``):

- ``tools: [calculator, python, my_tool]``: names of registered
  :class:`~rl_core.cards.ToolCard` s (built-ins or any installed plugin);
- ``tool_config_path: tools.yaml``: verl's tool-config format,
  ``tools: [{class_name: pkg.mod.Thing, config: {...}, tool_schema: {...}}]``.
  ``class_name`` may name a plain typed function (its schema is derived) or a
  class following verl's ``BaseTool`` protocol (``__init__(config,
  tool_schema)``, ``[async] create / execute / release``); the module is
  imported when the tools are built, and one that does not import is a
  :class:`ToolConfigError` naming ``tools[i].class_name``.

A plain typed function with a Google-style docstring is a tool: its schema
is ``transformers.utils.get_json_schema(fn)``. Keyword-only arguments (after
``*``, e.g. ``ground_truth``) are left out of the schema and *hidden*: the model cannot set
them; a data row fills them through ``extra_info.tools_kwargs[<tool>]``
(verl's ``create_kwargs`` / ``execute_kwargs`` are merged).

:func:`call_tool` runs one call: arguments checked against the schema, sync
functions in a thread, everything under a timeout. An exception, a timeout,
unknown arguments, a result that is not text (or not valid Unicode, or a flood), and an exit attempt
(``sys.exit``, ``KeyboardInterrupt``, ``os._exit``: :mod:`rl_agent.containment`) become a :class:`ToolResult` with
``status`` other than ``"ok"`` and a message the model sees; the rollout goes
on. A *sync* function that hangs cannot be killed from Python: its thread is
abandoned after the timeout and counted as *hung* until it returns
(:func:`hung_calls`, reported as ``agent/tool_hung_calls``). The leak is
bounded: while ``rollout.multi_turn.max_hung_tool_calls`` calls of a tool
are hung, its next calls are not started and answer an error (status
``"hung"``, a counted tool error), so a tool that always hangs holds at most
that many threads. The built-in ``python`` tool runs code in a separate,
killed process instead; a tool that must not leak at all should do the same
or be ``async`` (an async tool is cancelled at its timeout).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from typing import Any, Callable

import attrs

from rl_agent.containment import call_async, call_sync, result_problem
from rl_core.cards import load_object
from rl_core.problems import Problem, UserError

STATUSES = ("ok", "error", "timeout", "bad_result", "bad_arguments", "unknown_tool")


class ToolConfigError(UserError, ValueError):
    """A tool configuration that cannot be used (names the key and the fix)."""


@attrs.frozen
class ToolResult:
    text: str
    status: str = "ok"
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@attrs.define
class Tool:
    """A callable tool. ``fn(**arguments, **hidden) -> str`` (may be ``async``)."""

    name: str
    schema: dict[str, Any]
    fn: Callable[..., Any]
    hidden: frozenset[str] = frozenset()
    takes_any_kwargs: bool = False

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema.get("function", {}).get("parameters", {}) or {}


# ------------------------------------------------------------------ schemas
def schema_problems(schema: Any, where: str) -> list[str]:
    """What is wrong with an OpenAI-style function schema (empty when it is usable)."""
    if not isinstance(schema, dict):
        return [f"{where} must be a mapping like {{type: function, function: {{name, description, parameters}}}}, got {type(schema).__name__}"]
    out = []
    if schema.get("type", "function") != "function":
        out.append(f"{where}.type must be 'function', got {schema.get('type')!r}")
    fn = schema.get("function")
    if not isinstance(fn, dict):
        return out + [f"{where}.function must be a mapping with name, description and parameters"]
    name = fn.get("name")
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        out.append(f"{where}.function.name must be an identifier (letters, digits, '_', '-', '.'), got {name!r}")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict) or params.get("type") != "object":
        out.append(f"{where}.function.parameters must be a JSON schema with type: object, got {params!r}")
    else:
        props = params.get("properties", {})
        if not isinstance(props, dict):
            out.append(f"{where}.function.parameters.properties must be a mapping of argument name -> JSON schema")
            props = {}
        required = params.get("required", [])
        if not isinstance(required, list) or any(r not in props for r in required):
            out.append(f"{where}.function.parameters.required must list names from properties ({sorted(props)}), got {required!r}")
    return out


def _normal_schema(schema: dict[str, Any]) -> dict[str, Any]:
    fn = dict(schema["function"])
    fn.setdefault("description", "")
    fn.setdefault("parameters", {"type": "object", "properties": {}})
    fn.pop("return", None)
    return {"type": "function", "function": fn}


def _without_keyword_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A stand-in for ``fn`` whose signature lacks its keyword-only (hidden, per-sample) parameters."""
    sig = inspect.signature(fn)
    kw_only = {n for n, p in sig.parameters.items() if p.kind == inspect.Parameter.KEYWORD_ONLY}
    if not kw_only:
        return fn

    def shim(*args, **kwargs):  # never called: only read by get_json_schema
        raise NotImplementedError

    shim.__name__ = fn.__name__
    shim.__doc__ = fn.__doc__
    shim.__signature__ = sig.replace(parameters=[p for n, p in sig.parameters.items() if n not in kw_only])
    shim.__annotations__ = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k not in kw_only}
    return shim


def tool_from_function(fn: Callable[..., Any], *, name: str | None = None, schema: dict | None = None) -> Tool:
    """A :class:`Tool` from a typed function with a docstring (schema from ``get_json_schema`` unless given)."""
    if schema is None:
        from transformers.utils import get_json_schema

        try:
            schema = get_json_schema(_without_keyword_only(fn))
        except Exception as exc:  # noqa: BLE001 - transformers raises its own DocstringParsingException / TypeHintParsingException
            raise ToolConfigError(
                f"function {getattr(fn, '__qualname__', fn)!r} cannot be a tool: {exc}; give it type hints for every argument and a "
                "Google-style docstring with an 'Args:' section, or give its schema explicitly"
            ) from None
    problems = schema_problems(schema, "tool schema")
    if problems:
        raise ToolConfigError("; ".join(problems))
    schema = _normal_schema(schema)
    if name:
        schema["function"]["name"] = name
    sig = inspect.signature(fn)
    listed = set(schema["function"]["parameters"].get("properties", {}))
    hidden = frozenset(p for p in sig.parameters if p not in listed and sig.parameters[p].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    any_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    return Tool(name=schema["function"]["name"], schema=schema, fn=fn, hidden=hidden, takes_any_kwargs=any_kw)


def as_tool(obj: Any, name: str | None = None, schema: dict | None = None) -> Tool:
    """A card's factory object as a :class:`Tool`: a Tool, a factory returning one, or a plain function."""
    if isinstance(obj, Tool):
        return obj
    if callable(obj) and getattr(obj, "__rl_core_tool_factory__", False):
        return as_tool(obj(), name, schema)
    return tool_from_function(obj, name=name, schema=schema)


# ------------------------------------------------------------- verl's YAML
class _Namespace(dict):
    """A mapping that also allows attribute access (what verl tool classes read from ``tool_schema``)."""

    def __getattr__(self, key):
        try:
            value = self[key]
        except KeyError:
            raise AttributeError(key) from None
        return _ns(value)

    def model_dump(self, **_):
        return dict(self)


def _ns(value):
    return _Namespace(value) if isinstance(value, dict) and not isinstance(value, _Namespace) else value


async def _maybe_await(value):
    return await value if inspect.isawaitable(value) else value


def _verl_class_tool(cls: type, config: dict, schema: dict, where: str = "tool config") -> Tool:
    """Adapt a class following verl's ``BaseTool`` protocol (create / execute / release)."""
    try:
        try:
            instance = cls(config=config, tool_schema=_ns(schema))
        except TypeError:
            instance = cls(config, _ns(schema))
    except Exception as exc:  # noqa: BLE001 - the class's own __init__ fails: a config error naming it
        raise ToolConfigError(
            f"{where}.class_name: {cls.__module__}.{cls.__qualname__}(config, tool_schema) raised {type(exc).__name__}: {exc}; "
            "fix its config (tools[i].config) or the class"
        ) from None

    async def run(**kwargs):
        hidden = kwargs.pop("__hidden__", {})
        create_kwargs = dict(hidden.get("create_kwargs", {}))
        execute_kwargs = dict(hidden.get("execute_kwargs", {}))
        instance_id = None
        if hasattr(instance, "create"):
            created = await _maybe_await(instance.create(**create_kwargs))
            instance_id = created[0] if isinstance(created, tuple) else created
        try:
            result = await _maybe_await(instance.execute(instance_id, kwargs, **execute_kwargs))
        finally:
            if hasattr(instance, "release"):
                await _maybe_await(instance.release(instance_id))
        if isinstance(result, tuple):
            result = result[0]
        text = getattr(result, "text", result)
        return text

    tool = Tool(name=schema["function"]["name"], schema=_normal_schema(schema), fn=run, hidden=frozenset({"__hidden__"}))
    return tool


def load_tool_config(path: str | os.PathLike) -> list[Tool]:
    """The tools of a verl tool-config YAML file (see the module docstring); errors name ``tools[i].<key>``."""
    entries = _read_tool_config(path)
    tools = []
    for i, entry in enumerate(entries):
        where = f"{path}: tools[{i}]"
        cls_name = entry.get("class_name")
        schema = entry.get("tool_schema")
        if schema is not None:
            problems = schema_problems(schema, f"{where}.tool_schema")
            if problems:
                raise ToolConfigError("; ".join(problems))
        obj = _import_class_name(cls_name, where)
        if inspect.isclass(obj):
            if schema is None:
                raise ToolConfigError(f"{where}: the class {cls_name} needs a tool_schema (an OpenAI-style function schema)")
            tools.append(_verl_class_tool(obj, dict(entry.get("config") or {}), schema, where))
        else:
            tools.append(as_tool(obj, schema=schema))
    return tools


def _read_tool_config(path) -> list[dict[str, Any]]:
    import yaml

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ToolConfigError(f"rollout.multi_turn.tool_config_path: {path} does not exist")
    if not os.path.isfile(path):
        raise ToolConfigError(f"rollout.multi_turn.tool_config_path: {path} is a folder, not a file; name the YAML file inside it")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise ToolConfigError(f"rollout.multi_turn.tool_config_path: {path} is not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise ToolConfigError(f"rollout.multi_turn.tool_config_path: {path} cannot be read as YAML text ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise ToolConfigError(f"{path}: a tool config is a mapping with a 'tools' list: tools: [{{class_name, config, tool_schema}}]")
    for i, entry in enumerate(data["tools"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise ToolConfigError(f"{path}: tools[{i}] needs class_name: 'package.module.ClassOrFunction'")
    return data["tools"]


def _import_class_name(cls_name: str, where: str) -> Any:
    ref = cls_name if ":" in cls_name else ":".join(cls_name.rsplit(".", 1))
    try:
        return load_object(ref)
    except Exception as exc:  # noqa: BLE001 - an ImportError, AttributeError, or whatever the module raises on import
        raise ToolConfigError(
            f"{where}.class_name: {cls_name!r} does not import ({type(exc).__name__}: {exc}); install the package that provides it "
            "or fix the dotted path"
        ) from None


def tool_config_problems(path: str) -> list[Problem]:
    """``rlcore check``: the tool-config file reads, every class imports, every schema is valid."""
    try:
        load_tool_config(path)
    except Exception as exc:  # noqa: BLE001 - a ToolConfigError, or what building a tool raised that train would meet too
        what = str(exc) if isinstance(exc, ToolConfigError) else f"{path}: building its tools failed: {type(exc).__name__}: {exc}"
        what = what.removeprefix("rollout.multi_turn.tool_config_path: ")  # the key is the Problem's
        return [Problem(key="rollout.multi_turn.tool_config_path", what=what, fix="fix the tool config file (verl format: tools: [{class_name, config, tool_schema}])")]
    return []


# ------------------------------------------------------------------ calling
def _arguments_problem(tool: Tool, arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return f"the arguments must be a JSON object, got {type(arguments).__name__}"
    props = tool.parameters.get("properties", {}) or {}
    unknown = sorted(set(arguments) - set(props))
    if unknown and not tool.takes_any_kwargs:
        return f"unknown argument(s) {unknown}; {tool.name} takes {sorted(props)}"
    missing = [r for r in tool.parameters.get("required", []) if r not in arguments]
    if missing:
        return f"missing required argument(s) {missing}"
    return None


def hidden_kwargs(tool: Tool, tools_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The per-sample keyword arguments of ``tool`` from a row's ``extra_info.tools_kwargs``."""
    given = (tools_kwargs or {}).get(tool.name) or {}
    if not isinstance(given, dict):
        return {}
    if "__hidden__" in tool.hidden:  # verl class: create / execute kwargs passed as they are
        return {"__hidden__": given}
    merged = {**given.get("create_kwargs", {}), **given.get("execute_kwargs", {})} if ("create_kwargs" in given or "execute_kwargs" in given) else dict(given)
    return {k: v for k, v in merged.items() if k in tool.hidden or tool.takes_any_kwargs}


_HUNG: dict[str, int] = {}  # tool name -> its calls still running after their timeout (abandoned threads)
_HUNG_LOCK = threading.Lock()


def hung_calls(name: str | None = None) -> int:
    """Sync calls still running after their timeout: of tool ``name``, or of all tools."""
    with _HUNG_LOCK:
        return _HUNG.get(name, 0) if name is not None else sum(_HUNG.values())


class _ThreadCall:
    """One sync call in its own daemon thread; :meth:`abandon` marks it hung until the function returns."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.finished = False
        self.hung = False

    def abandon(self) -> None:
        with _HUNG_LOCK:
            if not self.finished and not self.hung:
                self.hung = True
                _HUNG[self.name] = _HUNG.get(self.name, 0) + 1

    def finish(self) -> None:
        with _HUNG_LOCK:
            self.finished = True
            if self.hung:
                _HUNG[self.name] -= 1


def _in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any], call: _ThreadCall) -> "asyncio.Future":
    """Run a sync tool in its own daemon thread: one that hangs past its timeout is abandoned (``call.abandon()``),
    and nothing (neither the end of the rollout's event loop nor the interpreter's exit) waits for it."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def run() -> None:
        try:
            value, ok = call_sync(call.name, fn, kwargs), True
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting call
            value, ok = exc, False
        finally:
            call.finish()
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop closed meanwhile (the call timed out long ago)
            pass

    threading.Thread(target=run, name=f"rl-core-tool-{getattr(fn, '__name__', 'tool')}", daemon=True).start()
    return fut


async def call_tool(tool: Tool | None, name: str, arguments: Any, *, timeout_s: float, tools_kwargs: dict | None = None, max_hung: int = 4) -> ToolResult:
    """Run one tool call; every failure is a :class:`ToolResult` the model sees (see the module docstring)."""
    start = time.perf_counter()

    def done(text: str, status: str) -> ToolResult:
        if status != "ok":  # an error message may quote the model's arguments or the tool's own text: always valid text
            text = text[:4000].encode("utf-8", "replace").decode("utf-8")
        return ToolResult(text=text, status=status, seconds=time.perf_counter() - start)

    if tool is None:
        return done(f"Error: no tool named {name!r}", "unknown_tool")
    problem = _arguments_problem(tool, arguments)
    if problem:
        return done(f"Error: {problem}", "bad_arguments")
    kwargs = {**arguments, **hidden_kwargs(tool, tools_kwargs)}
    try:
        if inspect.iscoroutinefunction(tool.fn):
            result = await asyncio.wait_for(call_async(tool.name, tool.fn, kwargs), timeout_s)
        else:
            hung = hung_calls(tool.name)
            if hung >= max_hung:
                return done(f"Error: the tool {tool.name} was not run: {hung} of its earlier calls are still running past their timeout", "hung")
            call = _ThreadCall(tool.name)
            try:
                result = await asyncio.wait_for(_in_daemon_thread(tool.fn, kwargs, call), timeout_s)
            except asyncio.TimeoutError:
                call.abandon()
                raise
    except asyncio.TimeoutError:
        return done(f"Error: the tool {tool.name} timed out after {timeout_s:g} s", "timeout")
    except Exception as exc:  # noqa: BLE001 - a tool may raise anything; the model sees it
        return done(f"Error: {_describe(exc)}", "error")
    if (problem := result_problem(tool.name, result)) is not None:
        return done(f"Error: {problem}", "bad_result")
    return done(result, "ok")


def _describe(exc: BaseException) -> str:
    """``Type: message`` of a tool's exception, even when its ``str()`` fails."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - a tool's exception class with a broken __str__
        return f"{type(exc).__name__} (its message cannot be shown)"
