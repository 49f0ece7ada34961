"""The core / plugin boundary, read from the source (no imports):

- a plugin package imports only rl-core's public modules (rl_core.plugin_api.PLUGIN_API, listed in
  docs/plugins.md), and no name with a leading underscore;
- core's code names no backend (vllm, sglang, fsdp, megatron): backends come from cards. Docstrings and
  comments may; so may the few tables listed here, each with its reason;
- core's import graph has no circle and no upward import (a module importing one of a higher layer).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from rl_core.plugin_api import PLUGIN_API

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "rl_core"
PLUGIN_PACKAGES = sorted(p for p in (ROOT / "plugins").glob("*/rl_*") if p.is_dir())


def _imports(tree: ast.AST):
    """``(module, [names], line)`` of every rl_core import (``import rl_core.x`` gives no names)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "rl_core":
            yield node.module, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "rl_core":
                    yield a.name, [], node.lineno


def test_plugins_import_only_the_public_api():
    assert PLUGIN_PACKAGES, "no plugin packages found"
    bad = []
    for pkg in PLUGIN_PACKAGES:
        for path in sorted(pkg.rglob("*.py")):
            for module, names, line in _imports(ast.parse(path.read_text())):
                where = f"{path.relative_to(ROOT)}:{line}"
                if module not in PLUGIN_API:
                    if f"{module}.{names[0] if names else ''}" not in PLUGIN_API:  # `from rl_core.rollout import samples`
                        bad.append(f"{where}: {module} is not in rl_core.plugin_api.PLUGIN_API")
                bad += [f"{where}: {module}.{n} is private" for n in names if n.startswith("_")]
                bad += [f"{where}: {module} has a private part" for part in module.split(".") if part.startswith("_")]
    assert not bad, "\n".join(bad)


def test_the_public_api_is_documented_and_exists():
    import importlib

    docs = (ROOT / "docs" / "plugins.md").read_text()
    for module in PLUGIN_API:
        assert f"`{module}`" in docs, f"docs/plugins.md does not list {module}"
        importlib.import_module(module)


# --------------------------------------------------------------- backend names in core
BACKENDS = re.compile(r"vllm|sglang|fsdp|megatron", re.IGNORECASE)
# (file, the line's text contains): why core may name a backend there
ALLOWED = {
    ("plugins.py", '"rollout": {"vllm"'): "install hints for a backend that is not installed (no card to ask)",
    ("plugins.py", '"train": {"fsdp"'): "install hints for a backend that is not installed (no card to ask)",
    ("cards.py", "PARALLELISM = frozenset"): "'fsdp' is a kind of parallelism a card declares, not a backend",
    ("cli/doctor_cluster.py", "ENGINES = ("): "engine distributions whose versions doctor reports on a node without cards",
    ("config/schema.py", 'strategy: str = choice("replicate", ("replicate", "fsdp"))'): "reward_model.strategy: torch FSDP2 sharding of the reward model, verl's value",
}
# reward_model.strategy's value "fsdp" (torch FSDP2 sharding of the reward model inside core, verl's name for it)
ALLOWED.update({(f, 'strategy == "fsdp"'): "reward_model.strategy" for f in ("memory.py", "rewards/classifier.py", "rewards/model_role.py", "trainer/loop.py")})
# actor.fsdp_config.*: verl's key names for offload settings, accepted as spelled
ALLOWED.update({("config/schema.py", "FsdpConfig"): "verl's actor.fsdp_config", ("config/schema.py", "fsdp_config"): "verl's actor.fsdp_config",
                ("lora_checks.py", "fsdp_config"): "verl's actor.fsdp_config", ("memory_lora.py", "fsdp_config"): "verl's actor.fsdp_config", ("memory_host.py", "fsdp_config"): "verl's actor.fsdp_config", ("memory.py", "fsdp_config"): "verl's actor.fsdp_config"})
# actor.fsdp_config.fsdp_size: verl's key for hybrid sharding (HSDP), read by the memory estimate
ALLOWED.update({("config/schema.py", "fsdp_size"): "verl's actor.fsdp_config.fsdp_size", ("memory.py", "fsdp_size"): "verl's actor.fsdp_config.fsdp_size"})
ALLOWED_FILES: set[str] = set()  # whole files (verl's dialect, which named backends, is the rl-verl plugin now)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _names_in_code(path: Path):
    """``(line, text)`` of identifiers and non-docstring strings that name a backend."""
    source = path.read_text()
    tree = ast.parse(source)
    docs = _docstring_nodes(tree)
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            text = node.name
        if text and BACKENDS.search(text):
            yield node.lineno, text


def test_core_code_names_no_backend():
    bad = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        if rel.startswith("testing/") or rel in ALLOWED_FILES:  # test support; verl's own names
            continue
        lines = path.read_text().splitlines()
        for line, text in _names_in_code(path):
            if any(rel == f and (marker in lines[line - 1] or marker in text) for f, marker in ALLOWED):
                continue
            bad.append(f"core/rl_core/{rel}:{line}: {text!r}")
    assert not bad, "core names a backend outside docs, tests and the allowed tables:\n" + "\n".join(bad)


# --------------------------------------------------------------- core's import graph
# lower layers first; a module may import modules of its own layer and lower ones only. A module's layer is that of
# its longest listed prefix (``trainer.guard`` before ``trainer``): a few leaf modules sit below their package.
LAYERS = [
    {"problems", "secrets", "hookspecs", "precision", "hf_cache", "micro_batches", "models", "engine_versions", "positions",
     "user_paths", "weight_sync_check", "console", "lora", "type_hints", "trainer.guard", "trainer.checkpoint", "trainer.dcp_io", "user_code",
     "routing_replay"},
    {"batch", "cards", "card_options", "factory_paths", "shared_prompt", "plugins", "data", "checkpoints", "algorithms", "plugin_api"},
    {"config", "trainer.tracking", "trainer.outputs", "backends", "modeling", "logprobs", "multimodal"},
    {"rollout", "agent", "rewards", "memory", "memory_lora", "memory_host", "lora_checks", "train_engine"},
    {"preflight", "resolver", "check_probes", "check_all"},
    {"worker", "cluster", "placement", "trainer", "async_rl"},
    {"cli", "testing", "__main__"},
]


UNLISTED = 4  # a module not listed yet counts as a feature module (the preflight / resolver layer); list it when you can


def _layer(module: str) -> int:
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        for i, layer in enumerate(LAYERS):
            if prefix in layer:
                return i
    return UNLISTED


def _module_graph(import_time_only: bool = False) -> dict[str, set[str]]:
    """Module -> the rl_core modules it imports (``import_time_only``: at module level, not inside functions)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE.parent).with_suffix("").as_posix().replace("/", ".")
        name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
        deps = graph.setdefault(name, set())
        tree = ast.parse(path.read_text())
        nodes = _module_level(tree) if import_time_only else ast.walk(tree)
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("rl_core"):
                for a in node.names:  # `from rl_core.rollout import samples` imports a module
                    sub = f"{node.module}.{a.name}"
                    deps.add(sub if (CORE.parent / (sub.replace(".", "/") + ".py")).exists() else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("rl_core"))
        deps.discard(name)
    return graph


def _module_level(tree: ast.AST):
    """The statements that run when the module is imported (not inside functions or methods)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_core_import_graph_has_no_upward_import():
    bad = []
    for module, deps in _module_graph().items():
        if _top(module) == "__init__":
            continue
        for dep in deps:
            if _top(dep) != "__init__" and _layer(dep) > _layer(module):
                bad.append(f"{module} (layer {_layer(module)}) imports {dep} (layer {_layer(dep)})")
    assert not bad, "\n".join(sorted(bad))


def test_core_import_graph_has_no_circle():
    """No circle among the imports that run when a module is imported (a function's own import runs later)."""
    graph = _module_graph(import_time_only=True)
    state: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if d not in graph:
                continue
            if state.get(d) == 1:
                circles.append(" -> ".join(stack[stack.index(d) :] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not circles, "\n".join(circles)


@pytest.mark.parametrize("module", ["rl_core.train_engine.backend", "rl_core.train_engine.engine", "rl_core.train_engine.update"])
def test_train_engine_files_are_small(module):
    import importlib

    assert len(Path(importlib.import_module(module).__file__).read_text().splitlines()) < 300
