"""The core / plugin boundary, read from the source (no imports):

- a plugin package imports only rl-core's public modules (rl_core.plugin_api.PLUGIN_API, listed in
  docs/plugins.md), and no name with a leading underscore; the test kit (plugins/testing, rl_core_testing) may
  import core's internals too, each listed in its README;
- core imports no plugin package (the test kit included), counting imports inside functions;
- core's code names no backend (vllm, sglang, fsdp, megatron): backends come from cards. Docstrings and
  comments may; so may the few tables listed here, each with its reason;
- core's import graph has no circle and no upward import (a module importing one of a higher layer).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from rl_core.plugin_api import PLUGIN_API

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "rl_core"
KIT = ROOT / "plugins" / "testing" / "rl_core_testing"  # test support: tracks core's internals (its README lists them)
PLUGIN_PACKAGES = sorted(p for p in (ROOT / "plugins").glob("*/rl_*") if p.is_dir() and p != KIT)


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


def _module_of(module: str, names: list[str]) -> list[str]:
    """The modules an import brings: ``from rl_core.train_engine import update`` imports rl_core.train_engine.update."""
    subs = [f"{module}.{n}" for n in names if (CORE.parent / (f"{module}.{n}".replace(".", "/") + ".py")).exists()]
    return subs or [module]


def test_the_test_kit_lists_the_internals_it_imports():
    readme = (KIT.parent / "README.md").read_text()
    bad = []
    for path in sorted(KIT.rglob("*.py")):
        for module, names, line in _imports(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{line}"
            for m in _module_of(module, names):
                if m not in PLUGIN_API and f"- `{m}`" not in readme:
                    bad.append(f"{where}: {m} is neither in rl_core.plugin_api.PLUGIN_API nor listed in plugins/testing/README.md (add it there)")
            bad += [f"{where}: {module}.{n} is private" for n in names if n.startswith("_")]
    assert not bad, "\n".join(bad)


# core modules that still import a plugin package, each with its reason (none may be added)
CORE_IMPORTS_PLUGIN: dict[str, str] = {}


def test_core_imports_no_plugin():
    plugin_packages = {p.name for p in (ROOT / "plugins").glob("*/rl_*") if p.is_dir()}
    assert "rl_core_testing" in plugin_packages
    bad = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        if rel in CORE_IMPORTS_PLUGIN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            bad += [f"core/rl_core/{rel}:{node.lineno}: imports {m} (a plugin)" for m in mods if m.split(".")[0] in plugin_packages]
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
    ("plugins.py", '"actor.fsdp_config": "rl-train-fsdp"'): "install hints for rl-train-fsdp's sections (actor / critic.fsdp_config)",
    ("cards.py", "PARALLELISM = frozenset"): "'fsdp' is a kind of parallelism a card declares, not a backend",
}
# actor.fsdp_config.*: verl's key names for offload settings, accepted as spelled
ALLOWED.update({("plan/features.py", "fsdp_config"): "verl's actor.fsdp_config"})
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


# --------------------------------------------------------------- a plugin's keys in core
# rl-hf-decode's rollout.engine_kwargs keys (its rl_hf_decode/keys.py, read as text) are its package's: its feature card
# lists them, its check checks their values. Core may name only these, each with its reason:
HF_DECODE_KEYS_IN_CORE = {
    "static_decode": "core's hf rollout asks for the decoder by it (false: its plain loop, with or without the package)",
    "compile": "a word core uses for model.compile",
}


def test_core_names_no_key_of_rl_hf_decode():
    source = (ROOT / "plugins" / "hf_decode" / "rl_hf_decode" / "keys.py").read_text()
    (keys,) = [ast.literal_eval(n.value) for n in ast.parse(source).body if isinstance(n, ast.Assign) and n.targets[0].id == "KEYS"]
    assert "decode_chunk" in keys and "decode_attention" in keys
    bad = [f"core/rl_core/{path.relative_to(CORE).as_posix()}:{n}: {key}" for path in sorted(CORE.rglob("*.py"))
           for n, line in enumerate(path.read_text().splitlines(), 1) for key in keys
           if key not in HF_DECODE_KEYS_IN_CORE and re.search(rf"\b{key}\b", line)]
    assert not bad, "core names rl-hf-decode's keys (its package lists and checks them):\n" + "\n".join(bad)


# --------------------------------------------------------------- core's import graph
# The layer table is docs/design.md's (between its <!-- layers --> markers), not the code's: lower layers first, a
# module may import modules of its own layer and lower ones only. A module's layer is that of its longest listed
# prefix (``lora.checks`` before ``lora``). Every import counts, those written inside functions too.
DESIGN = ROOT / "docs" / "design.md"


def design_layers() -> list[set[str]]:
    text = DESIGN.read_text()
    start, end = text.index("<!-- layers -->"), text.index("<!-- /layers -->")
    layers = []
    for row in text[start:end].splitlines():
        cells = row.split("|")
        if len(cells) > 3 and cells[1].strip()[:1].isdigit():
            layers.append(set(re.findall(r"`([\w.]+)`", cells[2])))
    return layers


def _layer(module: str, layers: list[set[str]]) -> int | None:
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        for i, layer in enumerate(layers):
            if prefix in layer:
                return i
    return None


def _module_graph() -> dict[str, set[str]]:
    """Module -> the rl_core modules it imports, at module level or inside functions (a package's __init__ too)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE.parent).with_suffix("").as_posix().replace("/", ".")
        name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
        deps = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("rl_core"):
                for a in node.names:  # `from rl_core.rollout import samples` imports a module
                    sub = f"{node.module}.{a.name}"
                    as_path = CORE.parent / sub.replace(".", "/")
                    deps.add(sub if as_path.with_suffix(".py").exists() or as_path.is_dir() else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("rl_core"))
        deps.discard(name)
    return graph


def test_every_core_module_has_a_layer_in_the_design():
    layers = design_layers()
    assert len(layers) >= 5, f"docs/design.md's layer table was not found or is too short: {layers}"
    unlisted = [m for m in _module_graph() if m not in ("rl_core", "rl_core.__main__") and _layer(m, layers) is None]
    assert not unlisted, "modules with no layer in docs/design.md's table (add them there):\n" + "\n".join(unlisted)


def test_core_import_graph_has_no_upward_import():
    layers = design_layers()
    bad = []
    for module, deps in _module_graph().items():
        if module in ("rl_core", "rl_core.__main__"):
            continue
        for dep in deps:
            if dep != "rl_core" and (_layer(dep, layers) is None or _layer(dep, layers) > _layer(module, layers)):
                bad.append(f"{module} (layer {_layer(module, layers)}) imports {dep} (layer {_layer(dep, layers)})")
    assert not bad, "\n".join(sorted(bad))


def test_core_import_graph_has_no_circle():
    """No circle among core's imports, counting those written inside functions (a circle hidden in a function is one)."""
    graph = _module_graph()
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


def test_the_graph_checks_find_what_they_look_for(tmp_path, monkeypatch):
    """The checks above can fail: a circle written inside functions and an upward import are both found."""
    pkg = tmp_path / "rl_core"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("def f():\n    from rl_core import high\n")
    (pkg / "high.py").write_text("from rl_core.low import f\n")
    monkeypatch.setattr(sys.modules[__name__], "CORE", pkg)
    graph = _module_graph()
    assert graph["rl_core.low"] == {"rl_core.high"} and graph["rl_core.high"] == {"rl_core.low"}
    with pytest.raises(AssertionError, match="rl_core.high -> rl_core.low -> rl_core.high|rl_core.low -> rl_core.high -> rl_core.low"):
        test_core_import_graph_has_no_circle()
    monkeypatch.setattr(sys.modules[__name__], "design_layers", lambda: [{"low"}, {"high"}])
    with pytest.raises(AssertionError, match="rl_core.low .layer 0. imports rl_core.high .layer 1."):
        test_core_import_graph_has_no_upward_import()


TRAIN_ENGINE_FILES = [
    "core/rl_core/train_engine/backend.py", "core/rl_core/train_engine/engine.py", "core/rl_core/train_engine/update.py",
    # the train backends (issue 46): each engine file and the parts split out of it by what they do
    *(f"plugins/train_fsdp/rl_train_fsdp/{m}.py" for m in ("engine", "forward", "lora", "weights", "offload")),
    *(f"plugins/train_megatron/rl_train_megatron/{m}.py" for m in ("engine", "schedule", "weights", "checkpoint", "offload")),
]


@pytest.mark.parametrize("path", TRAIN_ENGINE_FILES)
def test_train_engine_files_are_small(path):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines < 300, f"{path} has {lines} lines: split it by what the code does (under 300 each)"


# --------------------------------------------------------------- imports inside functions
# An import written inside a function is for a heavy dependency only: it keeps a light module (one whose import pulls
# none of these packages, e.g. what `rlcore check` and the plugin registry load) light. Anywhere else it hides
# structure, so core writes its imports at the top, except these, each with its reason:
HEAVY_PACKAGES = {"torch", "transformers", "tensordict", "safetensors", "pyarrow", "peft", "accelerate", "gguf", "ray", "matplotlib",
                  "numpy", "tensorboard", "wandb"}
LATE_IMPORTS = {  # (module, imported module): why it is imported when called
    ("rl_core.config.load", "rl_core.plugins"): "get_registry: tests patch it (the dialects a launch sees)",
    ("rl_core.cli.main", "rl_core.plugins"): "get_registry: tests patch it",
    ("rl_core.cli.check_cmd", "rl_core.config.load"): "load_report's check_config: tests patch it",
    ("rl_core.train_engine.update", "rl_core.algorithms.actor_loss"): "compute_actor_loss: tests patch it",
    ("rl_core.placement.local", "rl_core.placement.worker"): "HybridWorker: tests patch it (and a spawned rank imports it itself)",
}


def _module_level_nodes(tree: ast.AST):
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.ClassDef):
            todo.extend(n for n in node.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))


def heavy_modules() -> set[str]:
    """Core modules whose import pulls a heavy package, at module level, directly or through other core modules."""
    modules = {}
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE.parent).with_suffix("").as_posix().replace("/", ".")
        modules[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = ast.parse(path.read_text())
    direct, uses = {}, {}
    for name, tree in modules.items():
        ext, internal = set(), set()
        for node in _module_level_nodes(tree):
            found = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module, *(f"{node.module}.{a.name}" for a in node.names)] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            ext |= {f.split(".")[0] for f in found} & HEAVY_PACKAGES
            internal |= {f for f in found if f in modules}
        parts = name.split(".")
        internal |= {".".join(parts[:i]) for i in range(1, len(parts))} & set(modules)  # a package's __init__ runs first
        direct[name], uses[name] = bool(ext), internal - {name}
    heavy = {m for m, is_heavy in direct.items() if is_heavy}
    while True:
        more = {m for m in modules if m not in heavy and uses[m] & heavy}
        if not more:
            return heavy
        heavy |= more


def test_imports_inside_functions_are_for_heavy_dependencies_only():
    heavy = heavy_modules()
    assert "rl_core.rollout.hf" in heavy and "rl_core.cards" not in heavy  # the rule sees what it is about
    bad, seen = [], set()
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE.parent).with_suffix("").as_posix().replace("/", ".")
        module = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module.startswith("rl_core"):
                    targets = [f"{node.module}.{a.name}" if (CORE.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
                               else node.module for a in node.names]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names if a.name.startswith("rl_core")]
                else:
                    continue
                for target in targets:
                    if (module, target) in LATE_IMPORTS:
                        seen.add((module, target))
                    elif module in heavy or target not in heavy:
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target} imported inside a function of "
                                   f"{'a heavy module' if module in heavy else 'a light module, and it is light too'}: import it at the top")
    assert not bad, "\n".join(bad)
    assert seen == set(LATE_IMPORTS), f"LATE_IMPORTS lists imports that are gone: {sorted(set(LATE_IMPORTS) - seen)}"
