"""One batch of script calls on the wire: packed in the Redis protocol, run by one Lua script.

:class:`~crawlpace.stores.redis.connection.RedisConnection` queues the script calls
made while another batch is in flight and sends them together; this module is
how such a batch looks: the bytes written (:func:`pack`, RESP2 arrays of bulk
strings) and the one script that runs every call of the batch in a single
``EVALSHA`` (:func:`batch_source`), with :data:`FAILED` marking a call that raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._lua import CLOCK as _CLOCK

__all__ = ["BATCH", "FAILED", "as_text", "batch_source", "pack", "pack_each"]


def as_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def pack(commands: Iterable[Sequence[Any]]) -> bytes:
    """Commands in the Redis protocol (RESP2 arrays of bulk strings), ready to write.

    The usual batch is all ASCII text (the store passes numbers as text): it
    is formatted in one pass as one string and encoded once (a length in
    characters is then one in bytes), several times cheaper than encoding
    argument by argument. Numbers are formatted first; anything else (bytes,
    non-ASCII text) takes :func:`pack_each`.
    """
    out: list[bytes] = []
    for command in commands:
        texts: Sequence[Any] = command
        try:
            "".join(command)  # raises unless every argument is text (C speed, no formatting)
        except TypeError:
            texts = [arg if type(arg) is str else repr(arg) if type(arg) is float else str(arg)
                     if type(arg) is int else None for arg in command]
            if None in texts:  # bytes, say
                out.append(pack_each(command))
                continue
        body = "".join([f"${len(text)}\r\n{text}\r\n" for text in texts])
        if body.isascii():
            out.append(b"*%d\r\n" % len(texts) + body.encode())
        else:
            out.append(pack_each(command))
    return b"".join(out)


def pack_each(command: Sequence[Any]) -> bytes:
    """One command in the Redis protocol, encoded argument by argument."""
    out: list[bytes] = []
    add = out.append
    add(b"*%d\r\n" % len(command))
    for arg in command:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, float):
            data = repr(arg).encode()
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            raise TypeError(f"a script argument is bytes, str, int or float, not {type(arg).__name__}")
        add(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


# The script that runs a batch of calls in one EVALSHA: each script's source becomes the body
# of a function of (KEYS, ARGV), so the one-script-per-call cost of Redis is paid once per
# batch. ARGV: the call count, then per call its script's name, key count and argument count,
# then every call's arguments in order; KEYS: every call's keys in order. Returns one reply
# per call; a call that raised gives {FAILED, message} (the others still run).
FAILED = "__crawlpace_failed__"
BATCH = "__batch__"
BATCH_TAIL = """
local n, out = tonumber(ARGV[1]), {}
local ki, ai = 1, 2 + 3 * n
local batch_now = nil
for c = 1, n do
  local head = 2 + 3 * (c - 1)
  local fn, nk, na = calls[ARGV[head]], tonumber(ARGV[head + 1]), tonumber(ARGV[head + 2])
  -- unpack copies in C: a Lua loop over the arguments cost more than some scripts' own work.
  local keys, args = {unpack(KEYS, ki, ki + nk - 1)}, {unpack(ARGV, ai, ai + na - 1)}
  if args[1] == "" and clocked[ARGV[head]] then
    -- The server's time, read once per batch: its calls run as one atomic step anyway.
    if not batch_now then
      local t = redis.call("TIME")
      batch_now = string.format("%.17g", tonumber(t[1]) + tonumber(t[2]) / 1e6)
    end
    args[1] = batch_now
  end
  ki, ai = ki + nk, ai + na
  local ok, res = pcall(fn, keys, args)
  if ok then
    out[c] = res
  else
    if type(res) == "table" then res = res.err or "error" end
    out[c] = {"FAILED_MARK", tostring(res)}
  end
end
return out
""".replace("FAILED_MARK", FAILED)


def batch_source(scripts: Mapping[str, str]) -> str:
    parts = ["local calls, clocked = {}, {}\n"]
    for name, source in scripts.items():
        parts.append(f"calls[{name!r}] = function(KEYS, ARGV)\n{source}\nend\n")
        if source.startswith(_CLOCK):  # its ARGV[1] is the time, "" for the server's
            parts.append(f"clocked[{name!r}] = true\n")
    return "".join(parts) + BATCH_TAIL
