"""The intake pipeline: spans in, runs stored. One module per stage.

- ``_processor``: ``HarvestingSpanProcessor``, the production hook (a thin facade over the rest).
- ``_assembly``: open traces until their runs are complete (in process: the local root ends; on the
  network: the trace goes idle).
- ``_pipeline``: ``RunWriter``: runs -> sample -> redact -> a ``RowSink`` (the trace store).
- ``_settle``: the store's inbox, normalized at its first read.
- ``_ingest`` and ``_workers``: ``harvester ingest``, in-process or on worker processes.
- ``_receiver`` and ``_otlp``: ``harvester serve``, the OTLP/HTTP receiver.
- ``backends/``: readers for Phoenix, MLflow, Jaeger and Tempo (``harvester import``, ``incident --from``).

Names load lazily: the production hook never imports the receiver (protobuf) or ingest's workers.
"""

from __future__ import annotations

from .._lazy import lazy

_NAMES = {
    "HarvestingSpanProcessor": "_processor",
    "RowSink": "_pipeline",
    "RunWriter": "_pipeline",
    "merged_spans": "_pipeline",
    "run_rows": "_pipeline",
    "run_spans": "_pipeline",
    "sampled_in": "_pipeline",
    "normalize_inbox": "_settle",
    "Assembler": "_assembly",
    "IdleAssembler": "_assembly",
    "LocalRootAssembler": "_assembly",
    "IngestStats": "_ingest",
    "default_jobs": "_ingest",
    "ingest_files": "_ingest",
    "ingest_traces": "_ingest",
    "Receiver": "_receiver",
    "HEALTH_PATH": "_receiver",
    "TRACES_PATH": "_receiver",
    "BadRequest": "_otlp",
    "decode_json": "_otlp",
    "decode_protobuf": "_otlp",
    "decompress": "_otlp",
    "read_chunked": "_otlp",
}

__all__ = sorted(_NAMES)


__getattr__ = lazy(__name__, _NAMES, globals())


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
