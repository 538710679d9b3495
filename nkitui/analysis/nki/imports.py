"""Resolve import aliases to canonical names: `nl.*`, `nisa.*`, `nki.*`, `np.*`, `torch.*` ...

Real kernels spell the same API many ways (`import neuronxcc.nki.language as nl`,
`from nki import language as nl`, `import nki.isa as ni`, `from neuronxcc.nki.language import par_dim`,
`import nki` then `nki.language.load`). The analysis keeps, for each local name, the dotted module
path it stands for and maps dotted paths to canonical prefixes by longest match.
"""

from __future__ import annotations

import ast
from functools import lru_cache

# Longest prefixes first.
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("neuronxcc.nki.language", "nl"),
    ("neuronxcc.nki.isa", "nisa"),
    ("neuronxcc.nki.typing", "nt"),
    ("neuronxcc.nki.compiler", "ncc"),
    ("neuronxcc.nki.collectives", "ncoll"),
    ("neuronxcc.nki", "nki"),
    ("nki.language", "nl"),
    ("nki.isa", "nisa"),
    ("nki.typing", "nt"),
    ("nki.compiler", "ncc"),
    ("nki.collectives", "ncoll"),
    ("nki", "nki"),
    ("jax.numpy", "jnp"),
    ("numpy", "np"),
    ("torch_neuronx", "torch_neuronx"),
    ("torch", "torch"),
    ("jax", "jax"),
    ("cupy", "cupy"),
    ("scipy", "scipy"),
    ("math", "math"),
    ("functools", "functools"),
    ("pickle", "pickle"),
    ("joblib", "joblib"),
    ("os", "os"),
    ("pathlib", "pathlib"),
    ("ml_dtypes", "ml_dtypes"),
    ("operator", "operator"),
)

HOST_LIBRARIES = frozenset({"np", "torch", "jax", "jnp", "cupy", "scipy"})
FILE_READERS = frozenset({"np.load", "np.loadtxt", "np.fromfile", "np.genfromtxt", "torch.load", "pickle.load",
                          "pickle.loads", "joblib.load", "open", "pathlib.Path.read_bytes",
                          "pathlib.Path.read_text"})


@lru_cache(maxsize=4096)  # the same few names are looked up thousands of times per kernel
def canonical(dotted: str) -> str:
    """Canonical name for a dotted path, e.g. "neuronxcc.nki.language.load" -> "nl.load"."""
    for prefix, short in _PREFIXES:
        if dotted == prefix:
            return short
        if dotted.startswith(prefix + "."):
            return short + dotted[len(prefix):]
    return dotted


def module_namespace(module: str) -> str | None:
    if module == "neuronxcc.nki" or module.startswith("neuronxcc.nki."):
        return "legacy"
    if module == "nki" or module.startswith("nki."):
        return "new"
    return None


def _import_nodes(nodes: list[ast.stmt]) -> list[ast.stmt]:
    """Import statements among `nodes` and inside their if/try/with blocks (not inside functions)."""
    out: list[ast.stmt] = []
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                out.extend(_import_nodes(getattr(node, block, []) or []))
            for handler in getattr(node, "handlers", []):
                out.extend(_import_nodes(handler.body))
    return out


def collect_imports(nodes: list[ast.stmt]) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """Local name -> dotted path for every import among `nodes` (module level, incl. if/try blocks)."""
    aliases: dict[str, str] = {}
    lines: list[tuple[int, str]] = []
    for node in _import_nodes(nodes):
        if isinstance(node, ast.Import):
            for alias in node.names:
                lines.append((node.lineno, alias.name))
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                lines.append((node.lineno, full))
                aliases[alias.asname or alias.name] = full
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            # Package-relative helpers (`from ..utils.kernel_helpers import div_ceil`): keep the name so
            # that helpers such as div_ceil are recognised, without claiming to know their module.
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"relative.{node.module or ''}.{alias.name}"
    return aliases, lines


def namespace_of(import_lines: list[tuple[int, str]]) -> str | None:
    kinds = {module_namespace(m) for _, m in import_lines} - {None}
    if len(kinds) > 1:
        return "mixed"
    return next(iter(kinds), None)
