"""Rules as YAML files: ``fleetwatch rules apply FILE|DIR`` and ``fleetwatch rules export``.

A file holds ``rules:`` followed by a list of rule documents (:class:`RuleSpec`), or the list
alone, and/or ``inhibit_rules:`` followed by a list of inhibition rules
(:class:`~app.alerts.inhibit_spec.InhibitRuleSpec`, Alertmanager's shape). Errors name the file
and line: the YAML is composed into nodes (PyYAML keeps each node's start mark) and each
validation error's location is walked down that tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.alerts import inhibition, store
from app.alerts.inhibit_spec import InhibitRuleSpec
from app.alerts.rule_reach import Kept, beyond
from app.alerts.spec import RuleSpec

DEFAULT_RULES_DIR = Path(__file__).resolve().parent / "default_rules"


@dataclass(frozen=True)
class RuleFileError:
    """One problem at ``path:line`` (1-based); ``where`` is the field path in the document."""

    path: str
    line: int
    where: str
    message: str

    def __str__(self) -> str:
        where = f"{self.where}: " if self.where else ""
        return f"{self.path}:{self.line}: {where}{self.message}"


class RuleFilesInvalid(Exception):
    """Rule files that do not validate; ``errors`` lists every problem found."""

    def __init__(self, errors: list[RuleFileError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def rule_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.yaml``/``*.yml`` files of a directory, sorted.

    Raises:
        RuleFilesInvalid: ``path`` does not exist, or is a directory without rule files.
    """
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise RuleFilesInvalid([RuleFileError(str(path), 0, "", "no *.yaml or *.yml files")])
        return files
    if path.is_file():
        return [path]
    raise RuleFilesInvalid([RuleFileError(str(path), 0, "", "no such file or directory")])


def _node_at(node: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node:
    """The deepest node along a pydantic error location (tags of unions are skipped)."""
    tagged: yaml.Node | None = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            kind = [v.value for k, v in node.value if k.value == "kind"]
            if kind == [part] and tagged is not node:
                tagged = node  # once: ``condition.threshold.threshold`` has a key after the tag
                continue  # the union's tag (``condition.threshold.…``), not a key
            found = [v for k, v in node.value if getattr(k, "value", None) == part]
            if found:
                node = found[0]
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            node = node.value[part]
    return node


def _duplicate_keys(
    node: yaml.Node, path: str, seen_nodes: set[int] | None = None
) -> list[RuleFileError]:
    """Keys repeated in one mapping, anywhere under ``node``. Each node is walked once: an
    alias names the node it repeats, so a few lines of aliases of aliases ("billion laughs")
    would otherwise be walked an exponential number of times."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return []
    seen_nodes.add(id(node))
    errors = []
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key, value in node.value:
            if key.value in seen and key.value != "<<":
                errors.append(
                    RuleFileError(path, key.start_mark.line + 1, str(key.value), "duplicate key")
                )
            seen.add(key.value)
            errors += _duplicate_keys(value, path, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            errors += _duplicate_keys(item, path, seen_nodes)
    return errors


NO_RULES = (
    "no rules in this file (expected 'rules:' followed by a list of rules, and/or "
    "'inhibit_rules:' followed by a list of inhibition rules)"
)
KEYS = ("rules", "inhibit_rules")


@dataclass(frozen=True)
class Loaded:
    """One file's documents, each with the 1-based line where it starts."""

    rules: list[tuple[RuleSpec, int]]
    inhibit_rules: list[tuple[InhibitRuleSpec, int]]
    #: Each rule's YAML node, in ``rules`` order (to name the line of a field found wrong
    #: after validation).
    rule_nodes: list[yaml.Node] = field(default_factory=list)


def _load_lines(path: Path) -> list[tuple[RuleSpec, int]]:
    """:func:`load_file`'s rules, each with the 1-based line where its document starts."""
    return _load(path).rules


def _load(path: Path) -> Loaded:
    """Every document of one file (see :func:`load_file` for the errors)."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleFilesInvalid([RuleFileError(name, 0, "", f"cannot read: {exc}")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        message = f"YAML syntax: {exc.problem or exc}"
        raise RuleFilesInvalid([RuleFileError(name, line, "", message)]) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, …)
        line = text.count("\n", 0, exc.position) + 1
        message = f"YAML: character U+{exc.character:04X} is not allowed in a YAML file"
        raise RuleFilesInvalid([RuleFileError(name, line, "", message)]) from None
    except (yaml.YAMLError, RecursionError) as exc:
        message = f"YAML: {exc if isinstance(exc, yaml.YAMLError) else 'nested too deeply'}"
        raise RuleFilesInvalid([RuleFileError(name, 1, "", message)]) from None
    if root is None:
        raise RuleFilesInvalid([RuleFileError(name, 1, "", NO_RULES)])
    if duplicates := _duplicate_keys(root, name):
        raise RuleFilesInvalid(duplicates)
    sections: dict[str, tuple[Any, yaml.Node]] = {}
    if isinstance(data, dict):
        if not data or not set(data) <= set(KEYS):
            raise RuleFilesInvalid(
                [
                    RuleFileError(
                        name, 1, "", "a rule file's top-level keys are rules, inhibit_rules"
                    )
                ]
            )
        nodes = _key_nodes(root) if isinstance(root, yaml.MappingNode) else {}
        for key in data:
            sections[key] = (data[key], nodes.get(key, root))
    else:
        sections["rules"] = (data, root)
    for key, (items, node) in sections.items():
        if not isinstance(items, list):
            line = node.start_mark.line + 1
            raise RuleFilesInvalid([RuleFileError(name, line, key, f"must be a list of {key}")])
    if not any(items for items, _ in sections.values()):
        line = next(iter(sections.values()))[1].start_mark.line + 1
        raise RuleFilesInvalid([RuleFileError(name, line, "", NO_RULES)])
    errors: list[RuleFileError] = []
    rule_nodes: list[yaml.Node] = []
    rules = _validated(name, "rules", RuleSpec, sections.get("rules"), errors, rule_nodes)
    inhibits = _validated(
        name, "inhibit_rules", InhibitRuleSpec, sections.get("inhibit_rules"), errors
    )
    if errors:
        raise RuleFilesInvalid(errors)
    return Loaded(rules, inhibits, rule_nodes)


def _key_nodes(mapping: yaml.MappingNode) -> dict[Any, yaml.Node]:
    """Key → value node of a mapping, with the keys a merge key (``<<``) brings in (its own
    keys win, as in YAML's merge)."""
    nodes: dict[Any, yaml.Node] = {}
    merged: list[yaml.Node] = []
    for key, value in mapping.value:
        if key.value == "<<":
            merged += value.value if isinstance(value, yaml.SequenceNode) else [value]
        else:
            nodes[key.value] = value
    for source in merged:
        if isinstance(source, yaml.MappingNode):
            for key, value in _key_nodes(source).items():
                nodes.setdefault(key, value)
    return nodes


def _validated(
    name: str,
    key: str,
    model: Any,
    section: tuple[Any, yaml.Node] | None,
    errors: list[RuleFileError],
    nodes: list[yaml.Node] | None = None,
) -> list[Any]:
    """The documents of one section validated by ``model``, each with its line; problems are
    appended to ``errors``; with ``nodes``, each valid document's YAML node is appended to
    it."""
    if section is None:
        return []
    items, items_node = section
    specs: list[Any] = []
    for i, item in enumerate(items):
        inside = isinstance(items_node, yaml.SequenceNode) and i < len(items_node.value)
        item_node = items_node.value[i] if inside else items_node
        try:
            specs.append((model.model_validate(item), item_node.start_mark.line + 1))
            if nodes is not None:
                nodes.append(item_node)
        except ValidationError as exc:
            for err in exc.errors():
                node = _node_at(item_node, tuple(err["loc"]))
                where = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                errors.append(
                    RuleFileError(
                        name,
                        node.start_mark.line + 1,
                        f"{key}[{i}]" + (f".{where}" if where else ""),
                        msg,
                    )
                )
    return specs


def load_path(path: Path, *, source_prefix: str = "file") -> list[tuple[RuleSpec, str]]:
    """Every rule under ``path`` with its source (``file:<name>``), all validated first.

    Raises:
        RuleFilesInvalid: every error of every file, and rule names defined twice.
    """
    return load_all(path, source_prefix=source_prefix)[0]


def load_all(
    path: Path, *, source_prefix: str = "file", kept: Kept | None = None
) -> tuple[list[tuple[RuleSpec, str]], list[tuple[InhibitRuleSpec, str]]]:
    """Every rule and every inhibition rule under ``path``, each with its source
    (``file:<name>``), all validated first; with ``kept``, also against what the server keeps
    (:func:`app.alerts.rule_reach.beyond`).

    Raises:
        RuleFilesInvalid: every error of every file, names defined twice (rules and
            inhibition rules each have their own names), and windows reaching back further
            than ``kept``.
    """
    loaded: list[tuple[RuleSpec, str]] = []
    inhibits: list[tuple[InhibitRuleSpec, str]] = []
    errors: list[RuleFileError] = []
    seen: dict[tuple[str, str], str] = {}
    for file in rule_files(path):
        try:
            found = _load(file)
        except RuleFilesInvalid as exc:
            errors += exc.errors
            continue
        source = f"{source_prefix}:{file.name}"
        for kind, entries, into in (
            ("rule", found.rules, loaded),
            ("inhibition rule", found.inhibit_rules, inhibits),
        ):
            for spec, line in entries:
                if (kind, spec.name) in seen:
                    message = f"{kind} name already defined at {seen[(kind, spec.name)]}"
                    errors.append(RuleFileError(str(file), line, spec.name, message))
                else:
                    seen[(kind, spec.name)] = f"{file}:{line}"
                into.append((spec, source))  # type: ignore[arg-type]
        if kept is not None:
            for (rule, _), node in zip(found.rules, found.rule_nodes, strict=True):
                for loc, message in beyond(rule, kept):
                    at = _node_at(node, loc).start_mark.line + 1
                    where = f"{rule.name}.{'.'.join(loc)}"
                    errors.append(RuleFileError(str(file), at, where, message))
    if errors:
        raise RuleFilesInvalid(errors)
    return loaded, inhibits


def apply_path(
    session: Session, *, path: Path, defaults: bool = False, kept: Kept | None = None
) -> store.ApplyReport:
    """Validate every rule and inhibition rule under ``path`` (with ``kept``, against what the
    server keeps), then create or update them (nothing is applied when any file has an error).
    The report is the rules'; the inhibition rules' is on ``report.inhibit``.

    Raises:
        RuleFilesInvalid: see :func:`load_all`.
    """
    specs, inhibits = load_all(path, source_prefix="defaults" if defaults else "file", kept=kept)
    report = store.apply_specs(session, specs=specs)
    report.inhibit = inhibition.apply_specs(session, specs=inhibits)
    return report


def export_yaml(session: Session) -> str:
    """Every stored rule and inhibition rule as one YAML document that ``apply`` takes back
    unchanged."""
    docs = []
    for rule in store.list_rules(session):
        doc = store.spec_of(rule).document()
        docs.append({k: v for k, v in doc.items() if v is not None})
    out: dict[str, Any] = {"rules": docs}
    inhibits = [r.spec for r in inhibition.list_rules(session)]
    if inhibits:
        out["inhibit_rules"] = inhibits
    return yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=100)
