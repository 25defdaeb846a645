"""Writes test vectors for `pyjson` from CPython 3.11 itself.

Usage:
    python3.11 crates/pyjson/src/gen_vectors.py /tmp/pyjson-vectors
    PYJSON_VECTORS=/tmp/pyjson-vectors cargo test -p pyjson --release -- --ignored

The files are large (tens of MB) and regenerated on demand; they are not committed. Every
line is tab-separated; binary or arbitrary text is hex-encoded (UTF-8 with surrogatepass for
text that may hold surrogates).
"""

import json
import math
import os
import random
import re
import struct
import sys
import unicodedata

assert sys.version_info[:2] == (3, 11), "expectations must come from CPython 3.11"
assert unicodedata.unidata_version == "14.0.0"

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
rnd = random.Random(20240611)
SURROGATES = re.compile("[\ud800-\udfff]")


def bits(x):
    return struct.pack(">d", x).hex()


def from_bits(h):
    return struct.unpack(">d", bytes.fromhex(h))[0]


def hexs(s):
    return s.encode("utf-8", "surrogatepass").hex()


def random_double():
    kind = rnd.randrange(6)
    if kind == 0:  # any bit pattern
        return struct.unpack(">d", rnd.getrandbits(64).to_bytes(8, "big"))[0]
    if kind == 1:  # short decimals at every scale
        return float(f"{rnd.randrange(1, 10**rnd.randrange(1, 18))}e{rnd.randrange(-330, 310)}")
    if kind == 2:  # around the repr layout switch points
        return float(f"{rnd.randrange(1, 10**rnd.randrange(1, 18))}e{rnd.randrange(-25, 5)}") * rnd.choice([1, -1])
    if kind == 3:  # integral values near 1e16
        return float(rnd.randrange(10**14, 10**17))
    if kind == 4:  # probabilities
        return rnd.random()
    return rnd.uniform(-1e6, 1e6)


# 1. repr(float): bits -> repr
with open(f"{OUT}/float_repr.tsv", "w") as f:
    specials = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e16,
                1e-4, 1e-5, 9999999999999998.0, 1e15, 0.1, 0.2, 0.3, 1 / 3, 2.0 / 3, 100.0, 123456789012345.6]
    for k in range(-330, 310):
        for m in (1, 2, 5, 9.999999999999999, 1.0000000000000002):
            specials.append(float(f"{m}e{k}"))
    # Few-significant-bit floats: where the shortest form can be an exact tie between two
    # candidates (CPython picks the even digit).
    dyadic = [math.ldexp(rnd.randrange(1, 2**rnd.randrange(1, 54)), rnd.randrange(-30, 90)) for _ in range(200_000)]
    for x in specials + dyadic + [random_double() for _ in range(300_000)]:
        if math.isfinite(x):
            f.write(f"{bits(x)}\t{repr(x)}\n")

# 2. round(x, n): bits, n -> bits of the result, or OVERFLOW
with open(f"{OUT}/round.tsv", "w") as f:
    def emit(x, n):
        try:
            r = round(x, n)
            f.write(f"{bits(x)}\t{n}\t{bits(r)}\n")
        except OverflowError:
            f.write(f"{bits(x)}\t{n}\tOVERFLOW\n")

    for _ in range(150_000):  # near the ties of round(., 4), at every magnitude used
        k = rnd.randrange(0, 10**rnd.randrange(1, 9))
        x = (k + 0.5) / 10**4 * rnd.choice([1, -1])
        for y in (x, math.nextafter(x, math.inf), math.nextafter(x, -math.inf)):
            emit(y, 4)
    for _ in range(100_000):
        emit(random_double(), 4)
        emit(rnd.random(), 4)
    for _ in range(100_000):
        emit(random_double(), rnd.randrange(-330, 340))
    for _ in range(30_000):
        n = rnd.randrange(0, 23)
        k = rnd.randrange(0, 10**rnd.randrange(1, 15))
        x = (k + 0.5) / 10**n
        emit(x, n)
        emit(math.nextafter(x, 0.0), n)
    for _ in range(30_000):
        n = rnd.randrange(1, 20)
        x = float((rnd.randrange(0, 10**rnd.randrange(1, 18)) * 10 + 5) * 10**(n - 1))
        emit(x, -n)
        emit(math.nextafter(x, math.inf), -n)

# 3. repr of every single-character string (surrogates excluded: Rust has no such chars)
with open(f"{OUT}/repr_chars.tsv", "w") as f:
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        f.write(f"{cp:x}\t{hexs(repr(chr(cp)))}\n")


# 4. documents: random JSON values, their text, and Python's renderings
ALPHABET = ["a", "b", "'", '"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "\x85",
            "\xa0", "\xad", "é", "\u0301", "\u2028", "\u200b", "\ufeff", "\U0001F600", "\U000E0001",
            "\uffff", "\U0010FFFF", " ", "\u3000", "\u0378", "\ue000", "{", "}", "[", "]", ":", ","]


def random_string():
    return "".join(rnd.choice(ALPHABET) for _ in range(rnd.randrange(0, 8)))


def random_scalar():
    kind = rnd.randrange(9)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.choice([True, False])
    if kind == 2:
        return rnd.randrange(-10**rnd.randrange(1, 60), 10**rnd.randrange(1, 60))
    if kind == 3:
        return rnd.choice([math.nan, math.inf, -math.inf, -0.0, 0.0, 1e16, 1e-5])
    if kind in (4, 5):
        return random_double()
    return random_string()


def random_value(depth=0):
    if depth > 4 or rnd.random() < 0.4:
        return random_scalar()
    if rnd.random() < 0.5:
        return [random_value(depth + 1) for _ in range(rnd.randrange(0, 5))]
    return {random_string(): random_value(depth + 1) for _ in range(rnd.randrange(0, 5))}


def clean(v):
    """v with every surrogate code point replaced by U+FFFD, as the Rust side holds it."""
    if isinstance(v, str):
        return SURROGATES.sub("\ufffd", v)
    if isinstance(v, list):
        return [clean(x) for x in v]
    if isinstance(v, dict):
        return {clean(k): clean(x) for k, x in v.items()}
    return v


def render(v):
    """compact text (or NONFINITE), spaced text, repr, str, all surrogate-free."""
    v = clean(v)
    try:
        compact = json.dumps(v, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        compact = "NONFINITE"
    spaced = json.dumps(v, ensure_ascii=False)
    return [compact, spaced, repr(v), str(v)]


def encodings(text):
    """The same document as bytes in the encodings json.loads detects."""
    raw = text.encode("utf-8", "surrogatepass")
    choice = rnd.randrange(8)
    if choice == 0:
        return b"\xef\xbb\xbf" + raw
    if choice == 1:
        return text.encode("utf-16", "surrogatepass")
    if choice == 2:
        return text.encode("utf-16-le" if rnd.random() < 0.5 else "utf-16-be", "surrogatepass")
    if choice == 3:
        return text.encode(rnd.choice(["utf-32", "utf-32-le", "utf-32-be"]), "surrogatepass")
    return raw


def mutate(b):
    b = bytearray(b)
    for _ in range(rnd.randrange(1, 4)):
        op = rnd.randrange(4)
        i = rnd.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b[i:i] = rnd.choice([b"\\", b"\"", b",", b"]", b"}", b"\\ud800", b"\\udc00", b"\xed\xa0\x80",
                                 b" ", b"\x0b", b"-", b"e", b".", b"0", b"NaN", b"\xff", b"\x00"])
        elif op == 2 and b:
            b[min(i, len(b) - 1)] = rnd.randrange(256)
        else:
            b = b[:i]
    return bytes(b)


with open(f"{OUT}/docs.tsv", "w") as f:
    # columns: body hex, OK/ERR, lone-surrogate flag, compact, spaced, repr, str (hex)
    def emit(body):
        try:
            v = json.loads(body)
        except (ValueError, RecursionError):
            f.write(f"{body.hex()}\tERR\n")
            return
        flat = json.dumps(v, ensure_ascii=False)
        lone = "1" if SURROGATES.search(flat) else "0"
        cols = [hexs(t) for t in render(v)]
        f.write("\t".join([body.hex(), "OK", lone] + cols) + "\n")

    for _ in range(60_000):
        v = random_value()
        sep = rnd.choice([(",", ":"), (", ", ": "), (" , ", " : ")])
        text = json.dumps(v, ensure_ascii=rnd.random() < 0.3, separators=sep)
        if rnd.random() < 0.2:
            text = rnd.choice([" ", "\n", "\t", "\r", ""]) + text + rnd.choice([" ", "\r\n", ""])
        body = encodings(text)
        emit(body)
        emit(mutate(body))
    # literal escapes for surrogates, paired and not
    for _ in range(5_000):
        parts = [rnd.choice(["\\ud83d", "\\ude00", "\\ud800", "\\udfff", "\\u0041", "x", "\\uDBFF\\uDFFF"])
                 for _ in range(rnd.randrange(1, 5))]
        emit(("[\"" + "".join(parts) + "\"]").encode())

print("wrote", OUT)
