"""The layers of docs/ARCHITECTURE.md, checked by a library: the import-linter contracts in
pyproject.toml hold (every import of every module, direct, read from the source), every module of
speed_runtime sits in a layer of them, the pure core imports nothing outside the standard library
but nacl, and the doc's layer list is the contracts' list (`python -m tests.test_layers` prints
the block to paste when a contract changes)."""
from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

import speed_runtime

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (import-linter depends on tomli there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
DOCUMENTED = ("runtime-layers",)  # layers contracts whose list docs/ARCHITECTURE.md shows


def contract(contract_id: str) -> dict:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c.get("id") == contract_id)


def layer_names(layer: str) -> list[str]:
    """The modules of one layer line ("a | b" independent siblings, "a : b" siblings that may import each other)."""
    return [name.strip() for name in layer.replace(":", "|").split("|")]


def render(contract_id: str) -> str:
    """The doc's block for a layers contract: its container, then one layer a line, top first."""
    c = contract(contract_id)
    containers = c.get("containers", [])
    head = f"{' '.join(f'{name}.' for name in containers)}   (each line imports only the lines below it)"
    return "\n".join([f"<!-- layers: {contract_id} -->", "```", head,
                      *(f"  {layer}" for layer in c["layers"]), "```"])


def test_the_import_contracts_hold():
    assert Path(speed_runtime.__file__).resolve().is_relative_to(ROOT)  # the checkout's code, not an installed copy
    assert lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True) == 0


def test_every_runtime_module_sits_in_a_layer():
    layers = {name for layer in contract("runtime-layers")["layers"] for name in layer_names(layer)}
    modules = {m.name for m in pkgutil.iter_modules(speed_runtime.__path__)}
    assert modules - layers == set(), "a module of speed_runtime in no layer: add it to pyproject.toml's runtime layers"
    assert layers - modules == set(), "a layer names no module of speed_runtime"


def test_the_core_imports_only_the_standard_library_and_nacl():
    graph = grimp.build_graph("speed_runtime", include_external_packages=True, cache_dir=None)
    outside = {(module, imported) for module in graph.find_descendants("speed_runtime.core")
               for imported in graph.find_modules_directly_imported_by(module)
               if imported.split(".")[0] not in ("speed_runtime", "nacl", *sys.stdlib_module_names)}
    assert outside == set()


def test_the_architecture_doc_lists_the_layers_of_the_contracts():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for contract_id in DOCUMENTED:
        assert render(contract_id) in doc, f"docs/ARCHITECTURE.md's {contract_id} block differs; paste:\n{render(contract_id)}"


if __name__ == "__main__":
    print("\n\n".join(render(contract_id) for contract_id in DOCUMENTED))
