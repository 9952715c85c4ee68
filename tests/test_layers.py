"""The package's shape: no import cycle between labwarden's subpackages, and every import goes
down the layers (grimp builds the graph from the source, TYPE_CHECKING imports included).

A failure names the chain of imports that breaks the rule, so the fix is where it says."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

import labwarden.tools

PACKAGE = "labwarden"
LAYERS: list[grimp.Layer] = [
    grimp.Layer("cli"),
    grimp.Layer("agent", "server", "playbook", "docgen"),
    grimp.Layer("runtime"),
    grimp.Layer("tools", "guardrails"),
    grimp.Layer("report"),
    grimp.Layer("qlab"),
    grimp.Layer("transcripts", "vlab", "doctor"),
    grimp.Layer("results"),
    grimp.Layer("lab", "prompts"),
    grimp.Layer("core"),
]
"""Top to bottom: a layer may import the layers below it, never one above; the modules of one
layer are independent of each other. `results` (every tool's output model, and the records of
traffic_sweep and saturate) sits below `report`, which reads them, and above `lab`, whose types
they hold. `core` (records, the call record, the spec, device text, errors, the event schema)
imports nothing of labwarden's."""
LAB_SIDES: list[grimp.Layer] = [grimp.Layer("drivers"), grimp.Layer("knobs", "host"),
                                grimp.Layer("dut")]
"""Inside lab/: `dut` (what talks to the DUT) is the bottom; the knobs pin through it, and host-side
work (the build, the symfs, which pulls the DUT's own libraries) may use it; the DUT side never
reaches into the host side. The drivers the profile chooses (load, flash) sit on top: they
combine both sides (stasim runs on the host, sysupgrade on the DUT)."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, include_external_packages=False)


def _subpackages(graph: grimp.ImportGraph, parent: str) -> list[str]:
    return sorted(graph.find_children(parent))


def _explain(illegal: set[grimp.PackageDependency]) -> str:
    lines = []
    for dep in sorted(illegal, key=lambda d: (d.importer, d.imported)):
        for route in dep.routes:  # heads fan in to the middle, which fans out to the tails
            chain = [",".join(sorted(route.heads)), *route.middle, ",".join(sorted(route.tails))]
            lines.append(f"{dep.importer} -> {dep.imported}: " + " -> ".join(c for c in chain if c))
    return "\n".join(lines)


def test_no_cycle_between_subpackages(graph: grimp.ImportGraph) -> None:
    subs = _subpackages(graph, PACKAGE)
    cycles = []
    for i, a in enumerate(subs):
        for b in subs[i + 1:]:
            there = graph.find_shortest_chain(a, b, as_packages=True)
            back = graph.find_shortest_chain(b, a, as_packages=True)
            if there and back:
                cycles.append(f"{' -> '.join(there)}  and back  {' -> '.join(back)}")
    assert not cycles, "import cycles between subpackages:\n" + "\n".join(cycles)


def test_every_subpackage_has_a_layer(graph: grimp.ImportGraph) -> None:
    named = {f"{PACKAGE}.{m}" for layer in LAYERS for m in layer.module_tails}
    missing = [s for s in _subpackages(graph, PACKAGE) if s not in named]
    assert not missing, f"give these a place in LAYERS: {missing}"


def test_imports_go_down_the_layers(graph: grimp.ImportGraph) -> None:
    illegal = graph.find_illegal_dependencies_for_layers(LAYERS, containers={PACKAGE})
    assert not illegal, "imports that go up a layer (or across siblings):\n" + _explain(illegal)


def test_lab_sides_are_layered(graph: grimp.ImportGraph) -> None:
    illegal = graph.find_illegal_dependencies_for_layers(LAB_SIDES, containers={f"{PACKAGE}.lab"})
    assert not illegal, "lab/ imports across its sides:\n" + _explain(illegal)


def test_core_imports_nothing_of_labwarden(graph: grimp.ImportGraph) -> None:
    core = f"{PACKAGE}.core"
    outside = sorted({m for mod in graph.find_descendants(core) | {core}
                      for m in graph.find_modules_directly_imported_by(mod)
                      if m.startswith(PACKAGE + ".") and not m.startswith(core + ".") and m != core})
    assert not outside, f"core must stay the bottom layer; it imports {outside}"


TOOLS_DIR = Path(labwarden.tools.__file__).parent


def _tool_modules() -> set[str]:
    """Modules of tools/ that are tools: they define a module-level `SPEC` (the registry's
    entries). The others -- context, registry, and helpers such as abtest and parity -- are
    not."""
    out = set()
    for path in TOOLS_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SPEC"
                                                    for t in node.targets) for node in tree.body):
            out.add(path.stem)
    return out


def _tools_imported(path: Path) -> list[tuple[int, str]]:
    """(line, module under labwarden.tools) of every import in the file, function-level included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.removeprefix("labwarden.tools.")) for a in node.names
                      if a.name.startswith("labwarden.tools.")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "labwarden.tools":
                found += [(node.lineno, a.name) for a in node.names]
            elif node.module.startswith("labwarden.tools."):
                found.append((node.lineno, node.module.removeprefix("labwarden.tools.").split(".")[0]))
    return found


def test_no_tool_module_imports_another_tool() -> None:
    """A tool that needs another tool's effect asks its context (`ctx.call`: guarded, logged
    under its call); what tools share as functions lives in lab/ or core/. So no module of
    tools/ imports a tool module, and none but the registry knows the registry (which loads
    the tools by name): a tool -> registry -> tool circle cannot form."""
    tools = _tool_modules()
    assert {"experiment", "flash", "measure", "sweep", "gate_check", "symbolize"} <= tools
    bad = []
    for path in sorted(TOOLS_DIR.glob("*.py")):
        for line, mod in _tools_imported(path):
            if mod != path.stem and (mod in tools or mod == "registry"):
                bad.append(f"tools/{path.name}:{line} imports labwarden.tools.{mod}")
    assert not bad, "tools import each other (use ctx.call, or move the engine to lab/):\n" + \
        "\n".join(bad)


def test_the_experiment_gate_check_registry_circle_is_gone(graph: grimp.ImportGraph) -> None:
    """The circle experiment -> gate_check -> registry -> experiment (the registry imports a
    tool by name) is gone: no tool reaches another tool or the registry through any chain of
    static imports either."""
    tools = {f"{PACKAGE}.tools.{m}" for m in _tool_modules()}
    registry = f"{PACKAGE}.tools.registry"
    chains = []
    for tool in sorted(tools):
        for other in sorted((tools - {tool}) | {registry}):
            chain = graph.find_shortest_chain(importer=tool, imported=other)
            if chain:
                chains.append(" -> ".join(chain))
    assert not chains, "import chains between tools:\n" + "\n".join(chains)
