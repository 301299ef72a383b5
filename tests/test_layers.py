"""The package's modules import each other without circles.

Every import counts, those inside functions and under ``TYPE_CHECKING``
included: a circle that only works because one side imports late is still a
circle for a reader who has to understand both modules at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import crawlpace

ROOT = Path(crawlpace.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in its body."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            # "from pkg import mod" imports the submodule; "from mod import name" the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in modules and target != name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _imports(path, modules) for path in paths}
    # A module always sits inside its packages: importing the package that
    # contains you is how Python loads you, not a circle of the design.
    for name, targets in graph.items():
        targets.difference_update({other for other in targets if name.startswith(other + ".")})
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_graph_sees_known_edges() -> None:
    graph = _graph()
    assert "crawlpace._throttle._permit" in graph["crawlpace._throttle._throttler"]
    assert "crawlpace._scoping._scopes" in graph["crawlpace._responses._feedback"]
    assert "crawlpace._settings._config_types" in graph["crawlpace._settings._config"]


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The layers of docs/architecture.md, lowest first. A module's layer is the
# longest entry below that is the module or one of its packages; a module may
# import its own layer's modules and lower ones, never a higher layer's.
# Anything not listed is an adapter (the top, ``crawlpace`` itself).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("basics", (
        "crawlpace._exceptions", "crawlpace._redact",
        "crawlpace._clock", "crawlpace._bounded",
        "crawlpace._jitter", "crawlpace._settings._names",
        "crawlpace._scoping._patterns", "crawlpace._user_agent",
    )),
    ("pure core", (
        "crawlpace.policy", "crawlpace._throttle._board",
        "crawlpace._settings._config_types", "crawlpace._settings._config_checks",
        "crawlpace._settings._config_crawl",
    )),
    ("settings", (
        "crawlpace._settings._config", "crawlpace._settings._config_parse",
        "crawlpace._settings._config_scrapy", "crawlpace._responses._blocks",
        "crawlpace._settings._effective", "crawlpace._settings._ineffective",
    )),
    ("stores", (
        "crawlpace.stores",
    )),
    ("edge logic", (
        "crawlpace._responses._feedback", "crawlpace._responses._headers",
        "crawlpace._responses._header_values", "crawlpace._responses._ratelimit",
        "crawlpace._scoping._scopes", "crawlpace._scoping._manager",
        "crawlpace._scoping._server_scopes", "crawlpace._scoping._resolver",
        "crawlpace._scoping._fetchable", "crawlpace._robotstxt._robots",
        "crawlpace._robotstxt._robots_cache", "crawlpace._throttle._stats",
        "crawlpace._throttle._observer",
    )),
    ("facade", (
        "crawlpace._throttle._throttler", "crawlpace._throttle._throttler_reports",
        "crawlpace._throttle._waiting", "crawlpace._throttle._permit",
        "crawlpace._throttle._release", "crawlpace._throttle._sync",
        "crawlpace._throttle._learned", "crawlpace._throttle._learning",
    )),
    ("schedulers", (
        "crawlpace.frontier",
    )),
    ("adapters", (
        "crawlpace",
    )),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (a dotted name, ``crawlpace.`` included)."""
    best, best_len = len(LAYERS) - 1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(name):
                found.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} "
                             f"({LAYERS[layer_of(target)][0]})")
    return found


def test_the_layer_table_reads_paths() -> None:
    names = [LAYERS[layer_of(module)][0] for module in
             ("crawlpace.policy.scope", "crawlpace._settings._config", "crawlpace.stores.redis",
              "crawlpace._scoping._scopes", "crawlpace._throttle._throttler", "crawlpace.frontier._scheduler",
              "crawlpace.crawl._job", "crawlpace", "crawlpace._settings._config_types")]
    assert names == ["pure core", "settings", "stores", "edge logic", "facade", "schedulers",
                     "adapters", "adapters", "pure core"]


def test_imports_point_down_the_layers() -> None:
    assert _upward_imports(_graph()) == []


def test_an_upward_import_is_caught() -> None:
    assert _upward_imports({"crawlpace.policy.scope": {"crawlpace._settings._config"}}) == [
        "crawlpace.policy.scope (pure core) imports crawlpace._settings._config (settings)"]


def test_the_frontier_uses_the_stores_public_api() -> None:
    reaches = {target for name, targets in _graph().items() if name.startswith("crawlpace.frontier.")
               for target in targets if target.startswith("crawlpace.stores._")}
    # _keys names the Redis keys every shared part (store, frontier, guard) lives under.
    assert reaches <= {"crawlpace.stores.redis._keys"}


def test_one_shared_poll() -> None:
    defined = [path.relative_to(ROOT).as_posix() for path in sorted(ROOT.rglob("*.py"))
               if "\nSHARED_POLL = " in path.read_text(encoding="utf-8")]
    assert defined == ["_throttle/_board.py"]
