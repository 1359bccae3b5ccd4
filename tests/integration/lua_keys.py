"""Checks that a Lua script for Redis takes every key it touches through KEYS.

Two checks, used by ``test_redis_scripts_keys``:

* ``static_violations(source)``: reads a script's text. Every ``redis.call`` /
  ``redis.pcall`` names its command as a literal; each key argument (by the
  command's key positions) is a ``KEYS[...]`` lookup, a variable or a table
  field, never built with ``..`` nor taken from ``ARGV``; and every assignment
  to such a variable or field, and every value passed for such a function
  parameter, is free of ``..`` and ``ARGV`` too.
* ``guarded(source)``: the script with every ``redis.call`` routed through a
  guard that fails the script when a key argument is not one of ``KEYS``.
"""

from __future__ import annotations

import re
from typing import Final

# Where a command's keys are: "first" (argument 1), "two" (1 and 2), "all", "none".
KEY_POSITIONS: Final[dict[str, str]] = {
    **dict.fromkeys(
        [
            "GET",
            "SET",
            "SETNX",
            "SETEX",
            "PSETEX",
            "GETDEL",
            "GETSET",
            "INCR",
            "INCRBY",
            "DECR",
            "DECRBY",
            "APPEND",
            "STRLEN",
            "HGET",
            "HSET",
            "HSETNX",
            "HDEL",
            "HINCRBY",
            "HGETALL",
            "HEXISTS",
            "HMGET",
            "HLEN",
            "HKEYS",
            "LPUSH",
            "RPUSH",
            "LPOP",
            "RPOP",
            "LRANGE",
            "LREM",
            "LTRIM",
            "LLEN",
            "LINDEX",
            "LSET",
            "ZADD",
            "ZREM",
            "ZSCORE",
            "ZRANGE",
            "ZREVRANGE",
            "ZRANGEBYSCORE",
            "ZRANGEBYLEX",
            "ZREMRANGEBYLEX",
            "ZREMRANGEBYSCORE",
            "ZLEXCOUNT",
            "ZCARD",
            "ZCOUNT",
            "ZINCRBY",
            "SADD",
            "SREM",
            "SMEMBERS",
            "SISMEMBER",
            "SCARD",
            "EXPIRE",
            "PEXPIRE",
            "EXPIREAT",
            "PEXPIREAT",
            "PERSIST",
            "TTL",
            "PTTL",
            "TYPE",
        ],
        "first",
    ),
    **dict.fromkeys(["DEL", "UNLINK", "EXISTS", "MGET", "TOUCH"], "all"),
    **dict.fromkeys(["RENAME", "RENAMENX", "RPOPLPUSH", "LMOVE", "SMOVE"], "two"),
    **dict.fromkeys(["PUBLISH", "TIME", "PING"], "none"),
}

_CALL = re.compile(r"redis\.p?call\s*\(")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_KEYS_LOOKUP = re.compile(r"^KEYS\s*\[[^\]]*\]$")
_STRING = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")


def _without_comments(source: str) -> str:
    return "\n".join(
        line.split("--", 1)[0] if "--" in line else line for line in source.split("\n")
    )


def _arguments(text: str, open_paren: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the call whose ``(`` is at ``open_paren``."""
    depth, start, args = 0, open_paren + 1, []
    index = open_paren
    quote: str | None = None
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:index].strip())
                return [a for a in args if a], index
        elif char == "," and depth == 1:
            args.append(text[start:index].strip())
            start = index + 1
        index += 1
    raise ValueError(f"unbalanced call at {text[open_paren : open_paren + 60]!r}")


def _tainted(expression: str, tainted_names: frozenset[str] = frozenset()) -> bool:
    """Built in the script: a concatenation, ARGV, or a variable assigned from either."""
    code = _STRING.sub("''", expression)
    # A lookup ``t[i]`` is as built as ``t`` is: an ARGV index only selects among its values.
    while (stripped := re.sub(r"([A-Za-z_]\w*)\s*\[[^\[\]]*\]", r"\1", code)) != code:
        code = stripped
    if ".." in code or "ARGV" in code:
        return True
    return any(word in tainted_names for word in re.findall(r"[A-Za-z_]\w*", code))


def _assignments(code: str) -> list[tuple[str, str]]:
    """(name, value) of every ``name = value`` and ``a, b = x, y``."""
    pairs = []
    for targets, values in _multiple_assignments(code):
        pairs += list(zip(targets, values, strict=False))
    pattern = r"(?<![.\w])([A-Za-z_]\w*)\s*=(?!=)\s*([^\n,}]+)"
    pairs += [(m.group(1), m.group(2).strip()) for m in re.finditer(pattern, code)]
    return pairs


def _tainted_names(code: str) -> frozenset[str]:
    """Variables holding a value built in the script (to a fixed point)."""
    names: frozenset[str] = frozenset()
    assignments = _assignments(code)
    while True:
        grown = names | {n for n, value in assignments if _tainted(value, names)}
        if grown == names:
            return names
        names = frozenset(grown)


def _key_arguments(command: str, args: list[str]) -> list[str]:
    kind = KEY_POSITIONS[command]
    if kind == "first":
        return args[:1]
    if kind == "two":
        return args[:2]
    if kind == "all":
        return args
    return []


def _function_parameters(code: str) -> dict[str, list[str]]:
    return {
        match.group(1): [p.strip() for p in match.group(2).split(",") if p.strip()]
        for match in re.finditer(r"function\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(([^)]*)\)", code)
    }


def _multiple_assignments(code: str) -> list[tuple[list[str], list[str]]]:
    """``a, b = x, y`` (with or without ``local``): the names and the values."""
    found = []
    pattern = r"^\s*(?:local\s+)?([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)+)\s*=(?!=)(.+)$"
    for line in code.split("\n"):
        match = re.match(pattern, line)
        if match:
            values, _ = _arguments(f"({match.group(2)})", 0)
            found.append(([n.strip() for n in match.group(1).split(",")], values))
    return found


def static_violations(source: str) -> list[str]:
    """Why ``source`` may touch a key it does not take through KEYS (empty: none found)."""
    code = _without_comments(source)
    tainted = _tainted_names(code)
    problems: list[str] = []
    names: set[str] = set()
    for match in _CALL.finditer(code):
        args, _ = _arguments(code, match.end() - 1)
        literal = _STRING.fullmatch(args[0]) if args else None
        if literal is None:
            problems.append(f"command is not a literal: redis.call({', '.join(args)})")
            continue
        command = args[0][1:-1].upper()
        if command not in KEY_POSITIONS:
            problems.append(f"unknown command {command}: add its key positions to KEY_POSITIONS")
            continue
        for key in _key_arguments(command, args[1:]):
            if _tainted(key, tainted):
                problems.append(f"{command}: key built in the script: {key}")
            elif not (_KEYS_LOOKUP.match(key) or _NAME.match(key)):
                problems.append(f"{command}: key is not KEYS[...] or a name: {key}")
            elif _NAME.match(key):
                names.add(key.rsplit(".", 1)[-1])
    for targets, values in _multiple_assignments(code):
        for target, value in zip(targets, values, strict=False):
            if target.rsplit(".", 1)[-1] in names and _tainted(value):
                problems.append(f"key variable {target} is built in the script: {value}")
    for name in sorted(names):
        # Every assignment to the name (local, global or a table field).
        pattern = rf"(?<![.\w]){name}\s*=(?!=)\s*([^\n,}}]+)|\.{name}\s*=(?!=)\s*([^\n,}}]+)"
        for match in re.finditer(pattern, code):
            value = (match.group(1) or match.group(2)).strip()
            if _tainted(value):
                problems.append(f"key variable {name} is built in the script: {name} = {value}")
    parameters = _function_parameters(code)
    for function, params in parameters.items():
        key_params = [i for i, p in enumerate(params) if p in names]
        if not key_params:
            continue
        for call in re.finditer(rf"(?<![\w.]){function}\s*\(", code):
            if code[max(0, call.start() - 9) : call.start()].strip().endswith("function"):
                continue
            args, _ = _arguments(code, call.end() - 1)
            for index in key_params:
                if index < len(args) and _tainted(args[index], tainted):
                    problems.append(
                        f"{function}() gets a key built in the script for {params[index]}: "
                        f"{args[index]}"
                    )
    return problems


_GUARD = """
local __declared = {}
for _, __key in ipairs(KEYS) do __declared[__key] = true end
local __positions = {%s}
local function __guarded_call(command, ...)
  local args = {...}
  local kind = __positions[string.upper(command)]
  if kind == nil then error('KEYS guard: unknown command ' .. command) end
  local keys = {}
  if kind == 'first' then keys = {args[1]}
  elseif kind == 'two' then keys = {args[1], args[2]}
  elseif kind == 'all' then keys = args end
  for _, key in ipairs(keys) do
    if not __declared[key] then error('UNDECLARED key ' .. tostring(key)) end
  end
  return redis.call(command, ...)
end
"""


def guarded(source: str) -> str:
    """``source`` whose every ``redis.call`` fails the script on a key not given in KEYS."""
    table = ", ".join(f"{name} = '{kind}'" for name, kind in sorted(KEY_POSITIONS.items()))
    return _GUARD % table + re.sub(r"redis\.call\s*\(", "__guarded_call(", source)
