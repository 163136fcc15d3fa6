"""The package's layout rules: no import cycle among its modules (function-level imports included),
each layer imports only the layers below it, and no library file grows past ~500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder on disk -> package name (pyproject's package-dir maps envs/ and agents/ under rehearsal_gym)
FOLDERS = {"rehearsal_gym": "rehearsal_gym", "envs": "rehearsal_gym.envs", "agents": "rehearsal_gym.agents"}
# layer of each package, lowest first: a module may import its own layer and the ones before it
LAYERS = [
    ("rehearsal_gym.core",),
    ("rehearsal_gym.envs", "rehearsal_gym.defaults"),
    ("rehearsal_gym.rehearsal",),
    ("rehearsal_gym.training",),
    ("rehearsal_gym.agents", "rehearsal_gym.adapters"),
    ("rehearsal_gym.cli",),
]
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if not (folder == "rehearsal_gym" and parts[:1] in (["envs"], ["agents"])):
                out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every package module `name` imports, at any level of the file (functions included)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    tree = ast.parse(path.read_text())
    # imports under `if TYPE_CHECKING:` are for annotations only and never run (SB3's callbacks
    # annotate their algorithm the same way); every other import counts, at any depth
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{a.name}" for a in node.names] + [prefix]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return len(LAYERS)  # the package root (rehearsal_gym/__init__.py): above everything


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == "rehearsal_gym":  # the root registers env ids only; everything may import it
                continue
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif not state.get(nxt):
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if not state.get(node):
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layers_import_only_downward():
    wrong = [
        f"{name} (layer {_layer(name)}) imports {dep} (layer {_layer(dep)})"
        for name, deps in sorted(_graph().items())
        for dep in sorted(deps)
        if dep != "rehearsal_gym" and _layer(dep) > _layer(name)
    ]
    assert not wrong, "\n".join(wrong)


def test_library_files_stay_small():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"
