"""The Dockerfile as stages: ``{stage name: [(instruction, value), …]}`` in order, parsed with
dockerfile-parse (no Docker daemon here)."""

from __future__ import annotations

from pathlib import Path

from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
#: The numeric user of the server stage, which the Kubernetes pods' runAsUser must name.
IMAGE_UID = 10001


def stages(path: Path = DOCKERFILE) -> dict[str, list[tuple[str, str]]]:
    """Each ``FROM … AS name`` stage's instructions (comments left out), in file order."""
    parsed: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for item in DockerfileParser(path=str(path)).structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "FROM":
            image, _, name = value.partition(" AS ")
            current = parsed.setdefault(name.strip() or image.strip(), [])
        elif current is not None and instruction != "COMMENT":
            current.append((instruction, value))
    return parsed


def last(stage: list[tuple[str, str]], instruction: str) -> str | None:
    """The value of the stage's last ``instruction`` (the one in force), or ``None``."""
    values = [value for name, value in stage if name == instruction]
    return values[-1] if values else None
