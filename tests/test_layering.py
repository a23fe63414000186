"""The package's imports point one way, through the layers its tree shows, with no cycle.

    core  <-  hf (the integration with transformers)  <-  families  <-  cli, bench  <-  cachelimit (the facade)

Read from the source: every `import` of a cachelimit module at module level or inside a function (a function-level
import cannot hide an upward edge or a cycle), and every string that names a cachelimit module (what
`importlib.import_module` loads, as the command line does for its commands). A module may import its own layer and
the layers below it only; within a layer, no cycle. The cache core reads only transformers' `cache_utils`, never its
generation code; the modules the command line needs for `--help` and argument errors import no torch.
"""

from __future__ import annotations

import ast
import importlib
import unittest
from pathlib import Path

import pytest

import cachelimit

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

ROOT = Path(cachelimit.__file__).parent

#: package prefix -> layer (higher may import lower); the longest matching prefix wins
LAYERS = {
    "cachelimit._moved": 0,
    "cachelimit._version": 0,
    "cachelimit.core": 1,
    "cachelimit.hf": 2,
    "cachelimit.families": 3,
    "cachelimit.cli": 4,
    "cachelimit.bench": 4,
    "cachelimit": 5,  # the package facade (lazy public names) and `python -m cachelimit`
}

#: what `cachelimit --help` and the flag checks import (tests/test_cli.py checks they load no torch at run time)
TORCH_FREE = (
    "cachelimit",
    "cachelimit.core",
    "cachelimit.core.policy",
    "cachelimit.hf",
    "cachelimit.hf.request",
    "cachelimit.hf.validation",
    "cachelimit.families",
    "cachelimit.families.registry",
    "cachelimit.families.table",
    "cachelimit.cli.main",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def runtime_nodes(tree: ast.Module, module_level_only: bool, annotations: bool = False):
    """The nodes that run: everything but `if TYPE_CHECKING:` blocks (annotations only; with `annotations`, those
    too); with `module_level_only`, only the statements that run when the module is imported (not inside functions
    or classes' methods)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if not annotations and isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        if module_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def imports_of(
    path: Path, modules: set[str], module_level_only: bool = False, annotations: bool = False
) -> dict[str, set[str]]:
    """{"cachelimit": the cachelimit modules `path` imports (`from .x import y` counts as x.y when y is a module),
    "external": the other modules it imports, dotted as written}; `module_level_only`: only what runs when the
    module itself is imported (not inside functions); `annotations`: the type-only imports too."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    nodes = list(runtime_nodes(tree, module_level_only, annotations))
    loads_by_name = any(isinstance(node, ast.Attribute) and node.attr == "import_module" for node in nodes)
    found, external = set(), set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
            external |= {target for target in targets if not target.startswith("cachelimit")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            elif not base.startswith("cachelimit"):
                external.add(base)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and loads_by_name:
            targets = [node.value]  # a module named as a string, in a module that imports by name
        else:
            continue
        found |= {target for target in targets if target in modules}
    # a module's own packages are imported before it anyway: not a dependency it adds
    found = {target for target in found if target != name and not name.startswith(f"{target}.")}
    return {"cachelimit": found, "external": external}


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def import_graph(annotations: bool = False) -> dict[str, set[str]]:
    paths = package_modules()
    return {name: imports_of(path, set(paths), annotations=annotations)["cachelimit"] for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target] if target in path else path + [target]
            if target not in state and (cycle := visit(target, path + [target])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


class LayeringTest(unittest.TestCase):
    def test_the_tree_has_the_layers(self):
        for package in ("core", "hf", "families", "cli", "bench"):
            self.assertTrue((ROOT / package / "__init__.py").is_file(), package)
        loose = sorted(path.name for path in ROOT.glob("*.py"))
        self.assertEqual(loose, ["__init__.py", "__main__.py", "_moved.py", "_version.py"])

    def test_no_import_cycle(self):
        """Through type-only imports too (their graph holds every runtime edge as well): an `if TYPE_CHECKING:`
        import never runs, so a cycle through one is no import error, but it is still two modules each of which
        must be read to understand the other. Where one module drives another that reads it back, the reader names
        it by a protocol (`core.layers.LayerOwner`, `core.window_plan.WindowShape`)."""
        graph = import_graph(annotations=True)
        self.assertIn("cachelimit.hf.applier", graph)
        self.assertIn("cachelimit.core.rotary", graph["cachelimit.core.layers"])  # a type-only import, seen
        self.assertIsNone(find_cycle(graph))

    def test_the_detector_finds_a_cycle(self):
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])

    def test_imports_point_down_the_layers(self):
        for source, targets in import_graph().items():
            for target in targets:
                with self.subTest(source=source, target=target):
                    self.assertLessEqual(layer_of(target), layer_of(source), f"{source} imports {target} (upward)")

    def test_the_detector_sees_function_level_and_string_imports(self):
        graph = import_graph()
        self.assertIn("cachelimit.cli.generate_command", graph["cachelimit.cli.main"])  # importlib, by name
        self.assertIn("cachelimit.hf.compat", graph["cachelimit.cli.pretrained"])  # inside a function
        self.assertEqual(layer_of("cachelimit.hf.compat"), 2)
        self.assertEqual(layer_of("cachelimit"), 5)

    def test_the_core_reads_no_generation_code(self):
        modules = package_modules()
        for name, path in modules.items():
            if layer_of(name) == LAYERS["cachelimit.core"]:
                external = imports_of(path, set(modules))["external"]
                transformers = {module for module in external if module.split(".")[0] == "transformers"}
                with self.subTest(module=name):
                    self.assertLessEqual(transformers, {"transformers.cache_utils"})

    def test_what_the_command_line_needs_first_imports_no_torch(self):
        """At import time (module level), through every cachelimit module they import."""
        modules = package_modules()
        seen, todo = set(), list(TORCH_FREE)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            found = imports_of(modules[name], set(modules), module_level_only=True)
            heavy = {module for module in found["external"] if module.split(".")[0] in ("torch", "transformers")}
            with self.subTest(module=name):
                self.assertFalse(heavy, f"{name} imports {sorted(heavy)} when it is imported")
            todo.extend(found["cachelimit"])


if __name__ == "__main__":
    unittest.main()


class MovedModulesTest(unittest.TestCase):
    """cachelimit 0.1's module paths fail with the place their contents went, not a bare ModuleNotFoundError."""

    def test_old_paths_say_where_they_went(self):
        for old, now in [
            ("cachelimit.window_cache", "cachelimit.core.cache"),
            ("cachelimit.layered_cache", "BoundedCache.from_model"),
            ("cachelimit.models.llama", "cachelimit.families.table"),
            ("cachelimit.utils.masks", "cachelimit.hf"),
        ]:
            with self.subTest(old=old), self.assertRaisesRegex(ImportError, f"is gone since cachelimit 0.2.0.*{now}"):
                importlib.import_module(old)

    def test_real_modules_are_untouched(self):
        self.assertEqual(importlib.import_module("cachelimit.core.cache").__name__, "cachelimit.core.cache")
        with self.assertRaises(ModuleNotFoundError):
            importlib.import_module("cachelimit.no_such_module")
