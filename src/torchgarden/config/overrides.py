"""Override strings and YAML files: `parse_override`, `load_yaml_file`, `dump_yaml`.

An override string is, in order of attempts:

1. comma-separated `key=value` pairs: `trainer.train_steps=100,task.name='a, b'`
   (dotted keys nest; values are ints, floats such as `1e-4`, `true`/`false`,
   `null`/`None`, quoted or bare strings, or one-level `[...]` lists);
2. YAML or JSON text holding a mapping: `{trainer: {train_steps: 100}}`;
3. the path of a YAML file holding a mapping.

All YAML is read with a safe loader that also reads `1e-4` (no dot) as a float.
"""

from __future__ import annotations

import graphlib
import os
import re
from pathlib import Path
from typing import Any

import yaml

from torchgarden.config.errors import ConfigError

__all__ = ["dump_yaml", "load_yaml_file", "parse_override"]

# PyYAML follows YAML 1.1, where `1e-4` (no dot, no sign) is a string.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")
_FLOAT_TAG = "tag:yaml.org,2002:float"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader whose float resolver also matches `1e-4`."""


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Safe dumper: block style, lists of scalars in flow style, `1e-4` strings quoted."""


for _yaml_class in (_Loader, _Dumper):
    _yaml_class.add_implicit_resolver(_FLOAT_TAG, _EXPONENT_FLOAT, list("-+0123456789."))


def _construct_tuple(loader: Any, node: yaml.SequenceNode) -> tuple[Any, ...]:
    return tuple(loader.construct_sequence(node))


# Model Garden's params.yaml files write tuples as `!!python/tuple [...]` (its loader reads
# them); a tuple of plain values is data, so this loader reads that tag too, and no other
# python/* tag.
_Loader.add_constructor("tag:yaml.org,2002:python/tuple", _construct_tuple)


def _represent_sequence(dumper: Any, data: Any) -> Any:
    flow = all(not isinstance(item, list | tuple | dict) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", list(data), flow_style=flow)


_Dumper.add_representer(list, _represent_sequence)
_Dumper.add_representer(tuple, _represent_sequence)


def dump_yaml(data: Any) -> str:
    """Returns `data` (a mapping, or a Config) as block-style YAML, keys in given order."""
    if hasattr(data, "as_dict"):
        data = data.as_dict()
    return yaml.dump(
        data,
        Dumper=_Dumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        width=1 << 16,
    )


#: Bounds on what a config YAML may hold, checked before anything is constructed: a file
#: of aliases (`a: &a [x, x]`, `b: &b [*a, *a]`, ...) doubles at each line, and nesting
#: deeper than a few hundred levels crashes the C parser.
MAX_YAML_BYTES = 8 << 20
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 200_000


def _load_text(text: str, *, source: str) -> Any:
    """Parses YAML text after checking its size, depth, aliases and duplicate keys."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(
            f"{source} holds {len(text)} characters; a config is at most {MAX_YAML_BYTES} "
            "(is it a data file?)"
        )
    try:
        _check_depth(text, source)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_node(node, source)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "invalid YAML"
        if "nesting depth" in problem:  # PyYAML >= 6.0.4 scans ahead and stops first.
            raise _too_deep(source, mark.line + 1 if mark else "?") from None
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"malformed YAML in {source}{where}: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"malformed YAML in {source}: {error}") from None


def _check_depth(text: str, source: str) -> None:
    """Walks the parser's events (no nodes yet) and stops at the first level too deep."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _too_deep(source, event.start_mark.line + 1 if event.start_mark else "?")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _too_deep(source: str, line: int | str) -> ConfigError:
    return ConfigError(f"{source} nests deeper than {MAX_YAML_DEPTH} levels (at line {line}); "
                       "a config is a few levels deep")


def _check_node(root: yaml.Node, source: str) -> None:
    """Counts the nodes the document expands to (aliases included, each node once per
    use) without expanding it, and refuses duplicate mapping keys and recursive aliases."""
    graph: dict[yaml.Node, list[yaml.Node]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if node not in graph:
            graph[node] = _children(node, source)
            stack.extend(graph[node])
    sizes: dict[yaml.Node, int] = {}
    try:
        for node in graphlib.TopologicalSorter(graph).static_order():  # children first
            sizes[node] = 1 + sum(sizes[child] for child in graph[node])
            if sizes[node] > MAX_YAML_NODES:
                raise ConfigError(
                    f"{source} expands to more than {MAX_YAML_NODES} values through its "
                    f"aliases (*name) (line {node.start_mark.line + 1}); a config is far smaller"
                )
    except graphlib.CycleError as error:
        line = error.args[1][0].start_mark.line + 1
        raise ConfigError(f"{source}: an alias refers to a value that contains it (line {line}); "
                          "a config cannot be recursive") from None


def _children(node: yaml.Node, source: str) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if not isinstance(node, yaml.MappingNode):
        return []
    seen: dict[Any, int] = {}
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            line = key.start_mark.line + 1
            if key.value in seen:
                raise ConfigError(
                    f"{source}: key {key.value!r} appears twice in one mapping (lines "
                    f"{seen[key.value]} and {line}); YAML would silently keep the last; "
                    "remove one"
                )
            seen[key.value] = line
    return [child for pair in node.value for child in pair]


def load_yaml_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a YAML file whose top level is a mapping (an empty file gives `{}`).

    Raises:
        ConfigError: If the file is missing or unreadable, is malformed (naming the
            line and column), or does not hold a mapping.
    """
    where = f"config file '{os.fspath(path)}'"
    try:
        size = os.path.getsize(path)
        if size > MAX_YAML_BYTES:
            raise ConfigError(f"{where} is {size} bytes; a config is at most {MAX_YAML_BYTES} "
                              "(is it a data file?)")
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{where} is not UTF-8 text (byte {error.object[error.start]:#04x} at "
                          f"offset {error.start}); is it the right file?") from None
    except OSError as error:
        raise ConfigError(f"cannot read {where}: {error.strerror or error}") from None
    data = _load_text(text, source=f"'{os.fspath(path)}'")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where} must hold a mapping at the top level, found {type(data).__name__}")
    return data


def parse_override(text: str) -> dict[str, Any]:
    """Parses an override string: `key=value` pairs, YAML/JSON text, or a YAML file path.

    Args:
        text: E.g. `'a.b=1,x=[1,2],s="x, y"'`, `'{a: {b: 1}}'` or `'/path/o.yaml'`.

    Returns:
        A nested dict (dotted keys expanded). An empty string gives `{}`.

    Raises:
        ConfigError: If the string is malformed key=value text, malformed YAML, or
            none of the three forms (e.g. a file that does not exist).
    """
    if not isinstance(text, str):
        raise ConfigError(f"parse_override expects a string, received {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        return {}
    try:
        stripped.encode("utf-8")
    except UnicodeEncodeError as error:  # Undecodable bytes from the command line.
        raise ConfigError(
            f"override {stripped[:20].encode('utf-8', 'replace')!r}...: byte {error.start} is "
            "not UTF-8 text; check the shell's encoding"
        ) from None
    pairs = _parse_pairs(stripped)
    if pairs is not None:
        return pairs
    data = _load_text(stripped, source="the override string")
    if isinstance(data, dict):
        return data
    if not Path(stripped).is_file():
        raise ConfigError(
            f"override {stripped!r} is neither key=value pairs, a YAML mapping, "
            "nor an existing YAML file"
        )
    return load_yaml_file(stripped)


# ------------------------------------------------------------------- key=value
_KEY = re.compile(r"\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*(\[[^\]]*\])?\s*=")
# A bare value runs to the next ',' that starts another key= (or to the end).
_BARE = re.compile(rf"(.*?)(?:(?=,{_KEY.pattern})|\Z)", re.DOTALL)
_LIST_ITEM = re.compile(r"[^,\]]*")
_SPACE = re.compile(r"\s*")
_BLANKS = re.compile(r"[ \t]*")
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")
WORDS = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("null", "None", "NULL", "~"), None),
}
"""The words an override (and a restriction) reads as a bool or None."""


def _parse_pairs(text: str) -> dict[str, Any] | None:
    """Parses `k=v,k2=v2`; returns None if `text` does not start with `key=`.

    As in Model Garden, `a.b[1]=2,a.b[0]=1` gives the list `a.b=[1, 2]` when the indices
    are exactly 0..n-1 (in any order).
    """
    if _KEY.match(text) is None:
        return None
    result: dict[str, Any] = {}
    indexed: dict[str, dict[int, Any]] = {}
    pos = 0
    while True:
        match = _KEY.match(text, pos)
        if match is None:
            raise ConfigError(f"override {text!r}: expected key=value at {text[pos : pos + 20]!r}")
        key, index = match.group(1), match.group(2)
        value, pos = _parse_value(text, match.end())
        if index is None:
            _insert(result, key, value, text)
        else:
            indexed.setdefault(key, {})[_list_index(text, key, index)] = value
        pos = _SPACE.match(text, pos).end()
        if pos == len(text):
            break
        if text[pos] != ",":
            raise ConfigError(f"override {text!r}: expected ',' after the value of {key!r}")
        pos += 1
    for key, items in indexed.items():
        if sorted(items) != list(range(len(items))):
            raise ConfigError(f"override {text!r}: {key}[i] sets indices {sorted(items)}; "
                              f"give every index from 0 to {max(items)}, or {key}=[...]")
        _insert(result, key, [items[i] for i in range(len(items))], text)
    return result


def _list_index(text: str, key: str, index: str) -> int:
    inner = index[1:-1].strip()
    if not inner.isdecimal():
        raise ConfigError(f"override {text!r}: '{key}{index}' needs an index >= 0, such as "
                          f"{key}[0]")
    return int(inner)


def _parse_value(text: str, pos: int) -> tuple[Any, int]:
    pos = _BLANKS.match(text, pos).end()
    if text[pos : pos + 1] in ("'", '"'):
        return _parse_quoted(text, pos)
    if text[pos : pos + 1] == "[":
        return _parse_list(text, pos)
    bare = _BARE.match(text, pos)
    return _scalar(bare[1].strip()), bare.end(1)


def _parse_quoted(text: str, pos: int) -> tuple[str, int]:
    quote = text[pos]
    end = text.find(quote, pos + 1)
    if end == -1:
        raise ConfigError(f"override {text!r}: unterminated {quote} quote at position {pos}")
    return text[pos + 1 : end], end + 1


def _parse_list(text: str, pos: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    pos = _SPACE.match(text, pos + 1).end()
    if text[pos : pos + 1] == "]":
        return items, pos + 1
    while True:
        pos = _SPACE.match(text, pos).end()
        if text[pos : pos + 1] == "[":
            raise ConfigError(
                f"override {text!r}: nested lists are not supported in key=value form; "
                "use YAML instead, e.g. '{a: [[1, 2], [3]]}'"
            )
        if text[pos : pos + 1] in ("'", '"'):
            item, pos = _parse_quoted(text, pos)
        else:
            end = _LIST_ITEM.match(text, pos).end()
            item, pos = _scalar(text[pos:end].strip()), end
        items.append(item)
        pos = _SPACE.match(text, pos).end()
        if pos == len(text):
            raise ConfigError(f"override {text!r}: missing ']' to close a list")
        if text[pos] == "]":
            return items, pos + 1
        if text[pos] != ",":
            raise ConfigError(f"override {text!r}: expected ',' or ']' in a list at position {pos}")
        pos += 1


def _scalar(token: str) -> Any:
    if token in WORDS:
        return WORDS[token]
    if _INT.match(token):
        return int(token)
    if _FLOAT.match(token):
        return float(token)
    return token


def _insert(result: dict[str, Any], key: str, value: Any, text: str) -> None:
    *parents, leaf = key.split(".")
    node = result
    for depth, part in enumerate(parents):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            taken = ".".join(parents[: depth + 1])
            raise ConfigError(
                f"override {text!r}: key {key!r} conflicts with {taken!r} set earlier"
            )
        node = child
    node[leaf] = value
