"""One owner for the sample tables: no module of ``app`` outside ``app.series`` names one.

"Names" means, in code (docstrings and comments are documentation, not access):

* a string holding a sample table's name as a word (``"gpu_sample"``, SQL text over
  ``nic_port_sample_1m``);
* an identifier bound to one (``gpu_sample``, ``NvlinkSample``, ``GPU_ROLLUPS``, ``RAW_TABLES``);
* an import of a module of ``app.series`` that defines tables (:data:`TABLE_MODULES`).

Other packages ask :mod:`app.series` for rows, latest values, windows and charts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"

TABLE_WORD = re.compile(r"\b(?:gpu|nvlink|disk|mount|nfs|nic_port)_sample(?:_\w+)?\b")
TABLE_IDENTIFIERS = re.compile(
    r"^(?:(?:gpu|nvlink|disk|mount|nfs|nic_port)_sample(?:_\w+)?|"
    r"(?:Gpu|Nvlink|Disk|Mount|Nfs|NicPort)Sample|"
    r"(?:GPU|DISK|NFS|NIC)_(?:ROLLUPS|FLEET)|RAW_TABLES|rollup_watermark)$"
)
TABLE_MODULES = frozenset(
    {
        "app.series.tables",
        "app.series.blocks",
        "app.series.minute_blocks",
        "app.series.arrivals",
        "app.series.rollups.models",
    }
)


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function) or bare
    string statements (attribute documentation)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                found.add(id(stmt.value))
    return found


def names_of(source: str) -> list[str]:
    """Where ``source`` names a sample table: ``"line N: what"`` per occurrence."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and TABLE_WORD.search(node.value):
                found.append((line, f"line {line}: string {node.value[:60]!r}"))
        elif isinstance(node, ast.Name) and TABLE_IDENTIFIERS.match(node.id):
            found.append((line, f"line {line}: name {node.id}"))
        elif isinstance(node, ast.Attribute) and TABLE_IDENTIFIERS.match(node.attr):
            found.append((line, f"line {line}: attribute .{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            if modules & TABLE_MODULES:
                found.append((line, f"line {line}: imports from {node.module}"))
        elif isinstance(node, ast.Import) and {a.name for a in node.names} & TABLE_MODULES:
            found.append((line, f"line {line}: imports a table module"))
    return [text for _, text in sorted(found)]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _outside_series() -> dict[str, list[str]]:
    found = {}
    for path in sorted(APP.rglob("*.py")):
        module = _module(path)
        if module == "app.series" or module.startswith("app.series."):
            continue
        if module == "app.models":
            continue  # the metadata registry: imports every table module for Alembic
        hits = names_of(path.read_text(encoding="utf-8"))
        if hits:
            found[module] = hits
    return found


def test_no_module_outside_series_names_a_sample_table() -> None:
    found = _outside_series()
    assert not found, "sample tables named outside app.series:\n" + "\n".join(
        f"{m}: {'; '.join(hits)}" for m, hits in found.items()
    )


def test_the_check_sees_each_form_of_naming() -> None:
    source = '''"""Docstring naming gpu_sample is documentation."""
from app.series.tables import NvlinkSample
from app.series import tables
import app.series.rollups.models
x = "SELECT 1 FROM nic_port_sample_1m WHERE x"
y = gpu_sample.c.power_w
z = m.GPU_ROLLUPS[60]
def f(gpu):
    """gpu_sample again, a docstring."""
    return gpu.last_sample_at, "gpu_samples", "a disk sample"  # not table names
'''
    hits = names_of(source)
    assert [h.split(":")[0] for h in hits] == [f"line {n}" for n in (2, 3, 4, 5, 6, 7)], hits
