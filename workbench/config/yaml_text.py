"""The text of a saved config: YAML read safely, written deterministically, with comments.

Reading uses PyYAML's safe loader only: a file can hold mappings, lists, strings, numbers,
booleans and nulls, never a tag that builds a Python object (``!!python/object/apply:...``
would run code on loading with an unsafe loader). Duplicate keys are refused too, because
YAML's own rule (the last one wins) would silently drop a value a person typed.

Writing is a pure function of the data: fixed section and key order, no timestamps of its
own, so saving the same content twice gives the same bytes and a diff shows only what
changed. PyYAML cannot write comments, so the text is assembled here: a comment block, then
``yaml.safe_dump`` of one section at a time, which keeps the result safe-loadable.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workbench.core.errors import InputError
from workbench.core.safefiles import write_atomic

__all__ = [
    "ConfigError",
    "ConfigWarning",
    "Section",
    "check_keys",
    "dump",
    "load_text",
    "read_yaml",
    "render",
    "write_text",
]


class ConfigError(InputError):
    """A saved config that cannot be used; the message names the file, the key and the problem."""

    def __init__(self, path: str | Path | None, key: str | None, problem: str):
        self.path, self.key, self.problem = path, key, problem
        where = ": ".join(str(p) for p in (path, key) if p is not None)
        super().__init__(f"{where}: {problem}" if where else problem)


class ConfigWarning(UserWarning):
    """Loading works, but something deserves a look (another GPU, an unknown variable, a knob
    that cannot act on this machine)."""


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys (YAML would keep the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)


_WIDTH = 96  # comment lines; YAML values are never wrapped (a launch line stays one line)
_TAG = re.compile(r"tag '(?:tag:yaml\.org,2002:)?([^']+)'")


def read_yaml(path: str | Path) -> Any:
    """The data in a YAML file, loaded safely; any failure is a ConfigError naming the file."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "no such file") from None
    except UnicodeDecodeError:
        raise ConfigError(path, None, "not a text file (not UTF-8): not a YAML config") from None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot be read: {exc.strerror or exc}") from None
    return load_text(text, path)


def load_text(text: str, path: str | Path | None = None) -> Any:
    """The data in YAML text, loaded safely; ``path`` only names the source in errors."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None


def _yaml_error(path: str | Path | None, exc: yaml.YAMLError) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
    problem = str(getattr(exc, "problem", None) or exc)
    tag = _TAG.search(problem)
    if isinstance(exc, yaml.constructor.ConstructorError) and tag:
        shown = "!!" + tag.group(1) if "python/" in tag.group(1) else tag.group(1)
        return ConfigError(
            path,
            where,
            f"YAML tag {shown!r} is not allowed: a config holds plain data only (mappings, "
            "lists, strings, numbers), and it is loaded safely, so no tag can build an object",
        )
    if isinstance(exc, yaml.constructor.ConstructorError):
        return ConfigError(path, where, problem)
    context = getattr(exc, "context", None)
    detail = f"{context}, {problem}" if context else problem
    return ConfigError(path, where, f"not valid YAML: {detail}")


def check_keys(path: str | Path, where: str, data: Mapping[str, Any], known: Iterable[str]) -> None:
    """Refuse keys of ``data`` not in ``known``, listing all of them and the known ones."""
    known = tuple(known)
    unknown = [str(k) for k in data if k not in known]
    if unknown:
        noun = "unknown key" if len(unknown) == 1 else "unknown keys"
        key = ", ".join(f"{where}.{k}" if where else k for k in unknown)
        raise ConfigError(path, key, f"{noun}; known: {', '.join(known)}")


@dataclass(frozen=True, slots=True)
class Section:
    """One top-level key of the file, with the comment lines written above it."""

    key: str
    value: Any
    comment: str = ""
    item_comments: Mapping[str, str] | None = None
    """Comment lines above individual entries of a mapping value (e.g. each knob's doc)."""


def dump(data: Any) -> str:
    """Block-style YAML of plain data, in the given key order, never line-wrapped."""
    return yaml.safe_dump(
        data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 30
    )


def _comment(text: str, indent: str = "") -> str:
    """``# `` lines, each paragraph line wrapped to the file's width (deterministically)."""
    width = _WIDTH - len(indent) - 2
    lines = []
    for line in text.splitlines():
        wrapped = textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False)
        lines += wrapped or [""]
    return "".join(f"{indent}# {line}".rstrip() + "\n" for line in lines)


def _render_section(section: Section) -> str:
    head = _comment(section.comment)
    if not section.item_comments or not section.value:
        return head + dump({section.key: section.value})
    body = []
    for name, value in section.value.items():
        doc = section.item_comments.get(name, "")
        body.append(_comment(doc, "  ") + _indent(dump({name: value})))
    return head + f"{section.key}:\n" + "".join(body)


def _indent(text: str) -> str:
    return "".join(f"  {line}" if line.strip() else line for line in text.splitlines(True))


def render(header: str, sections: Iterable[Section]) -> str:
    """The whole file: a header comment, then each section separated by a blank line."""
    return _comment(header) + "\n".join(_render_section(s) for s in sections)


def write_text(path: Path, text: str) -> None:
    """Write atomically (temporary file + rename): a reader never sees half a config.

    The temporary file has a random name and is created exclusively (``write_atomic``): a
    symlink planted beside the config under a predictable name is never followed. The config
    gets the usual permissions (umask).
    """
    write_atomic(path, text)
