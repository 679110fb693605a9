"""Reading a file that someone else made, within bounds: a regular file of limited size, JSON of
limited depth.

    raw = read_regular(path)              # bytes; ValueError: a FIFO, a device, a folder, too large
    obj = loads(raw)                      # ValueError: not JSON, nested too deeply, a huge number
    obj = load_json(path)                 # both
    except (OSError, ValueError) as e: raise ReportError(f"{path}: {problem(e)}")   # one line

report.json files shared for `compare` and `leaderboard`, run folders from a tarball, a data file
given with --local-data and a scan's contamination.json are read through here. What is refused:

* anything that is not a regular file (a FIFO would block the reader for ever; /dev/zero would
  never end);
* a file larger than MAX_BYTES (256 MiB: a report of 100,000 items is about 100 MB);
* JSON nested more than MAX_DEPTH levels (64; a base-bench report uses 6), checked before the
  parser runs, so a file of a million "[" gets one line instead of a RecursionError;
* a number of more than 4,300 digits (Python refuses to convert one; that becomes a ValueError too).

Every refusal is a ValueError (json.JSONDecodeError is one) whose message is one line; callers turn
it into their own error class (ReportError, RunError, DataError). Symlinks are followed: a path the
user gives is theirs to point where they like. Writers (reports_io.write_atomic, the run store)
never follow one. Where the platform has no O_NOFOLLOW (Windows), `follow=False` looks at the path
first and then checks that the file opened is the one looked at.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path

MAX_BYTES = 256 * 1024 * 1024
MAX_DEPTH = 64
_CHUNK = 1 << 22

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def read_regular(path: str | Path, limit: int = MAX_BYTES, follow: bool = True) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes (and, with
    `follow=False`, not a symbolic link).

    OSError when it cannot be opened or read (missing, no permission); ValueError when it is not a
    regular file or is too large. Opened without blocking, so a FIFO is refused, not waited on."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    seen = None  # without O_NOFOLLOW: what lstat saw, which the opened file must be
    if not follow and not hasattr(os, "O_NOFOLLOW"):
        seen = os.lstat(path)
        if stat.S_ISLNK(seen.st_mode):
            raise ValueError("a symbolic link, not a regular file; not followed")
    elif not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if not follow and e.errno == errno.ELOOP:
            raise ValueError("a symbolic link, not a regular file; not followed") from None
        raise
    try:
        st = os.fstat(fd)
        if seen is not None and not os.path.samestat(seen, st):
            raise ValueError("replaced while it was being opened; not read")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"not a regular file ({kind_of(st.st_mode)})")
        if st.st_size > limit:
            raise ValueError(f"larger than {_size(limit)} ({_size(st.st_size)}); not read")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise ValueError(f"larger than {_size(limit)}; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def json_depth(raw: bytes | str) -> int:
    """How deeply the arrays and objects of a JSON text nest (0 for a bare number or string)."""
    return json_shape(raw)[0]


def json_shape(raw: bytes | str) -> tuple[int, int]:
    """(how deeply the arrays and objects of a JSON text nest, about how many values it holds).

    Linear and without recursion: strings are cut out, then the brackets and commas are counted (the
    values are the commas plus the arrays and objects plus one, so an empty array counts as a value of
    its own). On text that is not JSON the counts may be off; the parser then refuses the text anyway."""
    import numpy as np

    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    data = _STRING.sub(b"", data)
    if not data:
        return 0, 1
    step = np.zeros(256, dtype=np.int8)
    step[[ord("["), ord("{")]] = 1
    step[[ord("]"), ord("}")]] = -1
    counted = np.zeros(256, dtype=bool)
    counted[[ord("["), ord("{"), ord(",")]] = True
    depth = deepest = 0
    values = 1
    for start in range(0, len(data), _CHUNK):  # in chunks, so the running sum needs little memory
        chunk = np.frombuffer(data[start : start + _CHUNK], dtype=np.uint8)
        run = np.cumsum(step[chunk], dtype=np.int64)
        deepest = max(deepest, depth + int(run.max()))
        depth += int(run[-1])
        values += int(np.count_nonzero(counted[chunk]))
    return deepest, values


def loads(raw: bytes | str, max_depth: int = MAX_DEPTH, max_values: int | None = None, strict: bool = False):
    """json.loads, but a ValueError with a one-line message for JSON nested deeper than
    `max_depth`, holding more than `max_values` values (when given: each value costs memory once
    parsed, so a file of a million empty arrays is refused before it is built), and for any other
    reason the parser gives up (RecursionError included). With `strict`, a number must be one that
    arithmetic can use: NaN, Infinity, a float that overflows (1e999) and an integer of more than
    MAX_INT_DIGITS digits are refused."""
    depth, values = json_shape(raw)
    if depth > max_depth:
        raise ValueError(f"nested {depth} levels deep (at most {max_depth} are read)")
    if max_values is not None and values > max_values:
        raise ValueError(f"holds about {values:,} JSON values (at most {max_values:,} are read)")
    hooks = {}
    if strict:
        hooks = {"parse_constant": _no_constant}
        if risky_numbers(raw):  # else no number can be refused: parse them natively
            hooks.update(parse_float=_finite_float, parse_int=_short_int)
    try:
        return json.loads(raw, **hooks)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise ValueError(str(e).splitlines()[0]) from None


MAX_INT_DIGITS = 18  # a strict integer fits in 63 bits (and in a float's range)
# What a refused number needs: a number (where a JSON value starts: at the text's start, or after
# ":", ",", "[" or white space) whose integer part has more than MAX_INT_DIGITS digits (a long
# integer, or a float too large), or whose exponent has 3 digits or more (1e999). A text with none
# holds no number that strict mode refuses, and its numbers are parsed by the C parser itself, three
# times as fast as through the checking hooks below. The candidates are found by plain substring
# search in a copy of the text whose digits are all "0" and whose "E" is "e" (a pattern with a
# character class costs as much as the parse it would save), then each candidate's start is looked
# at: a SHA-256's "e433764" is no number. A candidate in a string that does look like one costs only
# the slower, exact parse.
_FLAT = bytes.maketrans(b"0123456789E", b"0000000000e")
_NEEDLES = (b"0" * (MAX_INT_DIGITS + 1), b"e000", b"e+000", b"e-000")
_MANTISSA = frozenset(b"0123456789.")
_VALUE_START = frozenset(b":,[ \t\r\n")


def risky_numbers(raw: bytes | str) -> bool:
    """Whether `raw` may hold a number that strict mode refuses (False: it certainly holds none)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw  # bytes: translate is C
    flat = data.translate(_FLAT)
    for needle in _NEEDLES:
        at = flat.find(needle)
        while at >= 0:
            i = at
            while i > 0 and data[i - 1] in _MANTISSA:  # back to the first digit of the number
                i -= 1
            if i > 0 and data[i - 1] == 45:  # "-"
                i -= 1
            if i == 0 or data[i - 1] in _VALUE_START:
                return True
            at = flat.find(needle, at + len(needle))
    return False


def _no_constant(name: str):
    raise ValueError(f"a number that is {name} (not standard JSON; a finite number is needed)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"a number too large to use ({text[:20]}{'…' if len(text) > 20 else ''})")
    return x


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS} are read)")
    return int(text)


def load_json(
    path: str | Path, limit: int = MAX_BYTES, follow: bool = True, max_values: int | None = None, strict: bool = False
):
    """read_regular, then UTF-8, then loads: OSError or ValueError (UnicodeDecodeError is one)."""
    return loads(read_regular(path, limit, follow).decode("utf-8"), max_values=max_values, strict=strict)


def problem(e: BaseException) -> str:
    """Why a file could not be read, as a short phrase for a one-line error: "cannot be read (No
    such file or directory)", "not UTF-8", "not valid JSON (Expecting value: ...)", "nested 100000
    levels deep (at most 64 are read)", "not a regular file (a FIFO)"..."""
    if isinstance(e, OSError):
        return f"cannot be read ({e.strerror or e})"
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8"
    if isinstance(e, json.JSONDecodeError):
        return f"not valid JSON ({e})"
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"
