"""Moved to ``harvester.intake``; this module keeps the old import path working for one release."""

import warnings

from .intake import Receiver, decode_json, decode_protobuf, decompress, read_chunked  # noqa: F401

warnings.warn("harvester.receiver moved to harvester.intake", DeprecationWarning, stacklevel=2)
