"""Secret keys: what surrogates and canaries are keyed by (HMAC-SHA256), never written with
an output.

``phisieve keygen --out KEY`` writes a new random key (64 hex digits: 256 bits);
:func:`read_secret` reads one and :func:`check_secret` refuses short or low-entropy ones.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from itertools import pairwise
from pathlib import Path

from ..errors import ConfigError

MIN_SECRET_BYTES = 32
"""A secret shorter than this is refused (HMAC-SHA256 keys: the hash's 32-byte output)."""
MIN_SECRET_BITS = 128
"""The entropy a secret must show (:func:`check_secret`): the usual 128-bit security level."""
KEY_COMMAND = 'python -c "import secrets; print(secrets.token_hex(32))" > KEY'
"""A command that writes a good secret file (64 hex digits: 256 random bits, plain text)."""


def read_secret(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> bytes:
    """The secret key in ``path`` (its bytes, trailing whitespace removed).

    Raises
    ------
    ConfigError
        When the file is missing, lies inside ``out`` (the secret must never travel with the
        output), or holds a weak secret (:func:`check_secret`). The message names the file
        and gives the command that makes a good one (:data:`KEY_COMMAND`), never the secret.
    """
    path = Path(path)
    if out is not None:
        o, p = Path(out).resolve(), path.resolve()
        if p == o or o in p.parents:
            raise ConfigError(f"the secret file {path} lies inside the output {out}; keep it apart")
    try:
        secret = path.read_bytes().rstrip()
    except OSError as e:
        raise ConfigError(f"cannot read the secret file {path}: {e.strerror}") from None
    check_secret(secret, where=f"in {path}")
    return secret


def check_secret(secret: bytes, where: str = "") -> None:
    """Refuse a secret that is short or shows little entropy.

    A good secret is random: 32 bytes from ``secrets.token_bytes(32)``, or the 64 hex digits
    of :data:`KEY_COMMAND`. The check is a screen for obviously weak secrets (a word, a
    repeated pattern, padding), not a proof of strength; it asks for all of:

    * at least :data:`MIN_SECRET_BYTES` bytes;
    * no repetition of a unit at most half as long (``deadbeef`` × 8, ``ab`` × 16);
    * at least :data:`MIN_SECRET_BITS` bits of order-0 entropy (the Shannon entropy of the
      byte frequencies times the length: what a memoryless model needs to write the secret
      down), both of the bytes and of the differences between successive bytes (which
      catches runs such as ``abcdef...`` and ``123456...``).

    Random secrets clear the bar with room: 32 random bytes score about 150 bits (160 at
    most; under 128 needs a dozen repeated bytes or differences, probability about 1e-8:
    run the command again), 64 random hex digits about 240. A padded word scores 40-110,
    ``a`` × 32 scores 0.

    Parameters
    ----------
    secret
        The key.
    where
        Where the secret came from, for the message (``in key.txt``).

    Raises
    ------
    ConfigError
        Saying what is wrong and how to make a good secret; never any of its bytes.
    """
    problem = _secret_problem(secret)
    if problem is not None:
        raise ConfigError(
            f"the secret {where + ' ' if where else ''}{problem}; make a random one with "
            f"`{KEY_COMMAND}` (or secrets.token_bytes(32) in Python)"
        )


def _secret_problem(secret: bytes) -> str | None:
    """Why ``secret`` is weak (:func:`check_secret`), or None."""
    if not isinstance(secret, (bytes, bytearray)):
        return f"must be bytes, not {type(secret).__name__}"
    n = len(secret)
    if n < MIN_SECRET_BYTES:
        return f"has {n} bytes; it needs at least {MIN_SECRET_BYTES} random bytes"
    if 2 * _smallest_period(secret) <= n:
        return "repeats a short pattern"
    diffs = bytes((b - a) % 256 for a, b in pairwise(secret))
    bits = min(_order0_bits(secret), _order0_bits(diffs))
    if bits < MIN_SECRET_BITS:
        return f"shows about {bits:.0f} bits of entropy; it needs at least {MIN_SECRET_BITS}"
    return None


def _order0_bits(data: bytes) -> float:
    """Order-0 empirical entropy of ``data`` in bits: ``sum(-c * log2(c / n))`` over the
    count ``c`` of each distinct byte."""
    n = len(data)
    return -sum(c * math.log2(c / n) for c in Counter(data).values())


def _smallest_period(data: bytes) -> int:
    """The smallest ``p`` with ``data[i] == data[i + p]`` for every ``i`` (KMP border)."""
    border = [0] * len(data)
    k = 0
    for i in range(1, len(data)):
        while k and data[i] != data[k]:
            k = border[k - 1]
        if data[i] == data[k]:
            k += 1
        border[i] = k
    return len(data) - (border[-1] if data else 0)
