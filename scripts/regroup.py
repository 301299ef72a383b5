"""Regroup crawlpace's private modules into private sub-packages by concern (issue 35 item 1).

Run from the repository's root, on a clean work tree::

    python scripts/regroup.py            # move the files and rewrite every reference
    python scripts/regroup.py --dry-run  # only say what would change

It ``git mv``s each module of :data:`MOVES` to its new place, then rewrites
every reference to it across ``src/``, ``tests/``, ``bench/``, ``docs/`` and
the project files: relative imports (``from ._x``, ``from .._x``, ``from .
import _x``, re-anchored from each file's new place), absolute dotted names
anywhere in the text (imports, monkeypatch targets, logger names,
``mkdocstrings`` and mypy entries), and file paths (``_config.py``,
``stores/_allot.py``, ``src/crawlpace/...``) in docs and comments. Public
import paths do not change: only private modules move, and
``crawlpace.stores.redis`` becomes a package whose ``__init__`` is the module it
was.

A second run does nothing: a module already at its new place is not moved,
and no old name is left to rewrite. Modules that are not in the mapping (new
ones, written after this script) are listed at the end, so the mapping can be
extended before a run.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

# The planned layout: old module (dotted, under crawlpace) -> new module.
# docs/architecture.md ("The planned layout") describes the same mapping.
GROUPS: dict[str, tuple[str, ...]] = {
    # settings: the Settings object, TOML and Scrapy names, the checks, what took effect
    "_settings": ("_config", "_config_checks", "_config_parse", "_config_scrapy", "_config_types",
                  "_names", "_effective", "_ineffective"),
    # scopes: which scopes a request counts against, managers, patterns, per-server scopes
    "_scoping": ("_scopes", "_manager", "_server_scopes", "_resolver", "_patterns", "_fetchable"),
    # what a response says: feedback, server hint headers, RateLimit fields, soft blocks
    "_responses": ("_feedback", "_headers", "_header_values", "_ratelimit", "_blocks"),
    # robots.txt: the rules, their cache, the library clients' guard and its httpx fetch
    "_robotstxt": ("_robots", "_robots_cache", "_robots_guard", "_http_robots"),
    # the throttler, its waiting room and board, permits and releases, reports, warm start
    "_throttle": ("_throttler", "_throttler_reports", "_waiting", "_board", "_permit", "_release",
                  "_sync", "_observer", "_stats", "_learned", "_learning"),
    # the library clients' plumbing: the sync httpx client, retries, the last look
    "_clients": ("_http_sync", "_httpx_common", "_retry", "_last_look"),
}
#: Redis-only modules of stores/ -> stores/redis/ (stores/redis.py becomes stores/redis/__init__.py).
#: ``connection`` goes too: left beside the package, it and the package would import each other.
REDIS_ONLY = ("connection", "_allot", "_batch", "_cluster", "_fallback", "_keys", "_leases", "_lua",
              "_outage", "_pending", "_redis_admit", "_redis_lease", "_redis_options", "_redis_parts",
              "_redis_release", "_redis_snapshot", "_script_args", "_shared_policy", "_writeback")

MOVES: dict[str, str] = {
    **{f"crawlpace.{old}": f"crawlpace.{group}.{old}" for group, olds in GROUPS.items() for old in olds},
    **{f"crawlpace.stores.{old}": f"crawlpace.stores.redis.{old}" for old in REDIS_ONLY},
}
#: Modules that become packages: their file moves to the package's ``__init__.py``, the name stays.
INTO_PACKAGE = ("crawlpace.stores.redis",)
#: Public modules that move: a module re-exporting the moved one's ``__all__`` keeps the old path working.
SHIMS = ("crawlpace.stores.connection",)
#: The new packages' docstrings.
PACKAGE_DOCS = {
    "crawlpace._settings": "Settings: the Settings object, TOML and Scrapy names, checks, what took effect.",
    "crawlpace._scoping": "Scopes: which limits a request counts against, managers, patterns, servers.",
    "crawlpace._responses": "What a response says: feedback, hint headers, RateLimit fields, soft blocks.",
    "crawlpace._robotstxt": "robots.txt: the rules, their cache, the library clients' guard.",
    "crawlpace._throttle": "The throttler: its waiting room, board, permits, releases, reports, warm start.",
    "crawlpace._clients": "The library clients' plumbing: the sync httpx client, retries, the last look.",
}
#: Public modules and the few private ones that stay at the package root.
ROOT_KEEPS = ("__init__", "__main__", "http", "aiohttp", "requests", "testing",
              "_bounded", "_clock", "_exceptions", "_jitter", "_redact", "_user_agent")

SRC = Path("src")
#: Records of past runs name the modules as they were then.
KEEP_AS_WRITTEN = Path("bench/results")
TREES = ("src", "tests", "bench", "docs", "scripts")
PROJECT_FILES = ("pyproject.toml", "mkdocs.yml", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".lua", ".json"}
THIS = Path(__file__).resolve()


def path_of(module: str, *, package: bool = False) -> Path:
    parts = module.split(".")
    return SRC.joinpath(*parts, "__init__.py") if package else SRC.joinpath(*parts[:-1], parts[-1] + ".py")


def current_path(module: str) -> Path:
    return path_of(module, package=module in INTO_PACKAGE)


def new_path(module: str) -> Path:
    if module in INTO_PACKAGE:
        return path_of(module, package=True)
    return path_of(MOVES.get(module, module))


def map_module(name: str) -> str:
    """The new dotted name of ``name`` (a module, or a name inside one)."""
    for old in sorted(MOVES, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            return MOVES[old] + name[len(old):]
    return name


def module_of(path: Path) -> tuple[str, bool]:
    """The dotted module name of a file under src/, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def known_modules() -> set[str]:
    found = {module_of(path)[0] for path in SRC.rglob("*.py")}
    return found | set(MOVES) | set(MOVES.values())


def relative(from_package: str, target: str) -> tuple[int, str]:
    """``from <dots><rest>`` reaching ``target`` from inside ``from_package``."""
    here, there = from_package.split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return len(here) - common + 1, ".".join(there[common:])


def rewrite_imports(text: str, old_module: str, old_is_package: bool, new_module: str,
                    new_is_package: bool, modules: set[str]) -> str:
    """Re-anchor every ``from ... import`` of a file that moves from ``old_module`` to ``new_module``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    old_package = old_module if old_is_package else old_module.rpartition(".")[0]
    new_package = new_module if new_is_package else new_module.rpartition(".")[0]
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # line index, start col, end col, new head
    replaced: list[tuple[int, int, str]] = []  # first line index, end line (exclusive), new lines
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level and not old_module:
            continue  # a relative import outside the package (tests/ helpers): nothing of ours moves
        if node.level:
            anchor = old_package.split(".")
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, node.module]) if node.module else ".".join(anchor)
        else:
            base = node.module or ""
            if not base.startswith("crawlpace"):
                continue
        # "from pkg import mod": where each imported module goes decides the new base.
        by_base: dict[str, list[ast.alias]] = {}
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in modules and map_module(full) != full:
                moved = map_module(full)
                if moved.rpartition(".")[2] != alias.name:
                    raise SystemExit(f"renaming an imported module is not supported: {full} -> {moved}")
                by_base.setdefault(moved.rpartition(".")[0], []).append(alias)
            else:
                by_base.setdefault(map_module(base), []).append(alias)
        heads = {}
        for new_base in by_base:
            if node.level:
                level, rest = relative(new_package, new_base)
                heads[new_base] = "from " + "." * level + rest
            else:
                heads[new_base] = "from " + new_base
        line = lines[node.lineno - 1]
        if len(by_base) > 1:  # the names go to different packages: one statement per package
            indent = line[:node.col_offset]
            statements = [f"{heads[b]} import " + ", ".join(
                a.name if a.asname is None else f"{a.name} as {a.asname}" for a in aliases)
                for b, aliases in sorted(by_base.items(), key=lambda item: heads[item[0]])]
            end_line = node.end_lineno or node.lineno
            replaced.append((node.lineno - 1, end_line, "".join(f"{indent}{s}\n" for s in statements)))
            continue
        head = heads[next(iter(by_base))]
        match = re.match(r"(\s*)from\s+[.\w]+(?=\s+import\b)", line[node.col_offset:])
        if match is None:
            continue
        start = node.col_offset + len(match.group(1))
        end = node.col_offset + match.end()
        if line[start:end] != head:
            edits.append((node.lineno - 1, start, end, head))
    for index, start, end, head in sorted(edits, reverse=True):
        lines[index] = lines[index][:start] + head + lines[index][end:]
    for first, end_line, new_lines in sorted(replaced, reverse=True):
        lines[first:end_line] = [new_lines]
    return "".join(lines)


def dotted_pattern() -> re.Pattern[str]:
    olds = sorted(MOVES, key=len, reverse=True)
    return re.compile(r"(?<![\w.])(" + "|".join(re.escape(old) for old in olds) + r")(?![\w])")


def path_rules() -> list[tuple[re.Pattern[str], str]]:
    """File path mentions: ``_config.py``, ``crawlpace/_config.py``, ``stores/_allot.py``, ..."""
    rules = []
    for old, new in MOVES.items():
        old_rel = "/".join(old.split(".")[1:]) + ".py"
        new_rel = "/".join(new.split(".")[1:]) + ".py"
        rules.append((re.compile(r"(?<![\w./-])((?:src/)?crawlpace/)?" + re.escape(old_rel) + r"(?![\w/])"),
                      new_rel))
    for module in INTO_PACKAGE:
        old_rel = "/".join(module.split(".")[1:]) + ".py"
        new_rel = "/".join(module.split(".")[1:]) + "/__init__.py"
        rules.append((re.compile(r"(?<![\w./-])((?:src/)?crawlpace/)?" + re.escape(old_rel) + r"(?![\w/])"),
                      new_rel))
    return rules


def rewrite_text(text: str, dotted: re.Pattern[str], rules: list[tuple[re.Pattern[str], str]]) -> str:
    text = dotted.sub(lambda m: MOVES[m.group(1)], text)
    for pattern, new_rel in rules:
        def swap(match: re.Match[str], new_rel: str = new_rel) -> str:
            return (match.group(1) or "") + new_rel
        text = pattern.sub(swap, text)
    return text


LINE_LIMIT = 110  # pyproject.toml's ruff line-length


def _split_at(text: str, room: int) -> tuple[str, str] | None:
    cut = text.rfind(" ", 0, room)
    return None if cut <= 0 else (text[:cut], text[cut + 1:])


def wrap_long_lines(text: str, before: str) -> str:
    """Wrap the comment and docstring lines the rewrite made longer than :data:`LINE_LIMIT`.

    A trailing comment goes on its own line above; a comment line or a docstring
    line is cut at a space, its rest on the next line with the same indentation.
    Code lines are left to ``ruff --fix`` (imports) or reported.
    """
    old_lines = set(before.splitlines())
    out: list[str] = []
    quotes = 0  # triple quotes seen before this line: odd inside a docstring
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        inside = quotes % 2 == 1
        quotes += body.count('"""')
        if len(body) <= LINE_LIMIT or body in old_lines:
            out.append(line)
            continue
        indent = body[:len(body) - len(body.lstrip())]
        stripped = body.strip()
        if stripped.startswith("#"):
            parts = _split_at(body, LINE_LIMIT)
            if parts:
                out += [parts[0] + "\n", f"{indent}# {parts[1]}\n"]
                continue
        elif "  # " in body and not inside and len(body.split("  # ", 1)[0]) <= LINE_LIMIT:
            code, comment = body.split("  # ", 1)
            out += [f"{indent}# {comment}\n", code + "\n"]
            continue
        elif inside or stripped.startswith('"""'):
            parts = _split_at(body, LINE_LIMIT)
            if parts:
                out += [parts[0] + "\n", f"{indent}{parts[1]}\n"]
                continue
        out.append(line)
    return "".join(out)


def write_shim(module: str) -> None:
    """Keep ``module``'s public path: a module that re-exports what the moved one exports."""
    target = MOVES[module]
    tree = ast.parse(new_path(module).read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            names = list(ast.literal_eval(node.value))
    level, rest = relative(module.rpartition(".")[0], target)
    lines = [f'"""A public path kept for {target.rpartition(".")[2]!r}: everything here comes from '
             f'``{target}``."""', "", "from __future__ import annotations", "",
             f"from {'.' * level}{rest} import ("]
    lines += [f"    {name}," for name in sorted(names)]
    lines += [")", "", "__all__ = ["]
    lines += [f"    {name!r}," for name in names]  # the moved module's order, which ruff accepts
    lines += ["]", ""]
    shim = current_path(module)
    shim.write_text("\n".join(lines).replace("'", '"'), encoding="utf-8")
    git("add", str(shim))


def text_files() -> list[Path]:
    files = [Path(name) for name in PROJECT_FILES if Path(name).exists()]
    for tree in TREES:
        files += [path for path in Path(tree).rglob("*") if path.is_file() and path.suffix in TEXT_SUFFIXES
                  and "__pycache__" not in path.parts and path.resolve() != THIS
                  and not path.is_relative_to(KEEP_AS_WRITTEN)]
    return sorted(set(files))


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    options = parser.parse_args(argv)
    if not (SRC / "crawlpace" / "__init__.py").exists():
        print("run from the repository's root", file=sys.stderr)
        return 2
    modules = known_modules()
    moving = {old: new for old, new in MOVES.items()
              if current_path(old).exists() and not new_path(old).exists()}
    into_package = [module for module in INTO_PACKAGE
                    if path_of(module).exists() and not path_of(module, package=True).exists()]
    # 1. The new text of every file, computed at its old place.
    dotted, rules = dotted_pattern(), path_rules()
    new_texts: dict[Path, str] = {}
    for path in text_files():
        text = path.read_text(encoding="utf-8")
        updated = text
        if path.suffix == ".py" and path.is_relative_to(SRC):
            old_module, old_is_package = module_of(path)
            new_module = moving.get(old_module, old_module)
            new_is_package = old_is_package or old_module in into_package
            updated = rewrite_imports(updated, old_module, old_is_package, new_module, new_is_package,
                                      modules)
        elif path.suffix == ".py":  # tests, benches, scripts: their absolute imports of crawlpace
            updated = rewrite_imports(updated, "", False, "", False, modules)
        updated = rewrite_text(updated, dotted, rules)
        if path.suffix == ".py":
            updated = wrap_long_lines(updated, text)
        if updated != text:
            new_texts[path] = updated
    # 2. Where each file goes.
    destinations = {current_path(old): new_path(old) for old in moving}
    for module in into_package:
        destinations[path_of(module)] = path_of(module, package=True)
    packages = sorted({MOVES[old].rpartition(".")[0] for old in moving} | set(into_package))
    print(f"{len(destinations)} files to move, {len(new_texts)} files to rewrite, "
          f"{len(packages)} packages: {', '.join(packages) or '-'}")
    if options.dry_run:
        for source, target in sorted(destinations.items()):
            print(f"  git mv {source} {target}")
        for path in sorted(new_texts):
            print(f"  rewrite {path}")
    else:
        for module in into_package:  # a file cannot become a folder of the same name in one step
            source = path_of(module)
            parked = source.with_suffix(".py.regroup")
            git("mv", str(source), str(parked))
            destinations[parked] = destinations.pop(source)
            if source in new_texts:
                new_texts[parked] = new_texts.pop(source)
        for package in packages:
            folder = SRC.joinpath(*package.split("."))
            folder.mkdir(parents=True, exist_ok=True)
            init = folder / "__init__.py"
            if not init.exists() and package not in into_package:
                init.write_text(f'"""{PACKAGE_DOCS.get(package, "Private modules of crawlpace.")}"""\n',
                                encoding="utf-8")
                git("add", str(init))
        for source, target in sorted(destinations.items()):
            git("mv", str(source), str(target))
        for path, text in new_texts.items():
            destinations.get(path, path).write_text(text, encoding="utf-8")
        for path in new_texts:
            git("add", str(destinations.get(path, path)))
        for module in SHIMS:
            if module in moving:
                write_shim(module)
        # Moved imports sort differently: let ruff put each import block back in order.
        sorted_ok = subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "--select", "I", "-q",
                                    *[tree for tree in TREES if Path(tree).exists()]], check=False)
        if sorted_ok.returncode:
            print("ruff could not sort every import block: run ruff check --fix --select I", file=sys.stderr)
        git("add", "-u")
    # 3. What is left at the root.
    root = SRC / "crawlpace"
    moved = set(destinations)
    left = sorted(path.stem for path in root.glob("_*.py")
                  if path.stem not in ROOT_KEEPS and current_path(f"crawlpace.{path.stem}") not in moved)
    private = sorted(path.stem for path in root.glob("_*.py") if path.stem not in ("__init__", "__main__"))
    if not options.dry_run:
        print(f"private modules at the root now: {len(private)} ({', '.join(private)})")
    if left:
        print(f"not in the mapping, left at the root: {', '.join(left)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
