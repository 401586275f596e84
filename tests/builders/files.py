"""What a file harvester wrote says, compressed parts included: the secret greps read this, not raw bytes.

A store deflates its rows, so a secret in one would not show in the file's raw bytes: a grep of them
would pass whatever was stored. ``readable`` is the raw bytes followed by every packed blob found in
them (the store's tag and a raw deflate stream) and every zlib stream, inflated (rows in the main
file, the WAL and free pages alike).
"""

from __future__ import annotations

import zlib
from pathlib import Path

from harvester.store._codec import PACKED

# zlib's header at the levels the store writes (1) and the default (6), in case a test packs its own
_HEADERS = (b"x\x01", b"x\x9c", b"x^", b"x\xda")


def readable(path: Path) -> bytes:
    raw = path.read_bytes()
    parts = [raw]
    for header, skip, wbits in [(PACKED, len(PACKED), -15), *((h, 0, 15) for h in _HEADERS)]:
        at = raw.find(header)
        while at >= 0:
            try:
                parts.append(zlib.decompressobj(wbits).decompress(raw[at + skip : at + (64 << 20)]))
            except zlib.error:
                pass
            at = raw.find(header, at + 2)
    return b"\n".join(parts)
