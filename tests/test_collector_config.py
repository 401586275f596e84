"""The Collector config the README shows (docs/collector.yaml) is well-formed and wired to harvester.

No Collector binary here: the checks are the ones ``otelcol validate`` would fail on first (a pipeline
naming a component that is not defined) plus what harvester needs (errors kept, traces sent to
``/v1/traces``). PyYAML comes with langchain-core, already in the test extra.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import yaml

CONFIG = Path(__file__).resolve().parents[1] / "docs" / "collector.yaml"


def _config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def _kind(component_id: str) -> str:
    """``otlphttp/harvester`` -> ``otlphttp``: a component id is type[/name]."""
    return component_id.split("/", 1)[0]


def test_every_pipeline_component_is_defined():
    config = _config()
    pipelines = config["service"]["pipelines"]
    assert pipelines, "no pipeline"
    for name, pipeline in pipelines.items():
        assert _kind(name) == "traces"
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline.get(section, []):
                assert component in config[section], f"{name}: {section} {component!r} is not defined"
    used = {c for p in pipelines.values() for s in ("receivers", "processors", "exporters") for c in p.get(s, [])}
    defined = {c for s in ("receivers", "processors", "exporters") for c in config[s]}
    assert defined <= used, f"defined but unused: {defined - used}"


def test_pipeline_is_otlp_to_tail_sampling_to_batch_to_harvester():
    pipeline = _config()["service"]["pipelines"]["traces"]
    assert [_kind(r) for r in pipeline["receivers"]] == ["otlp"]
    kinds = [_kind(p) for p in pipeline["processors"]]
    assert "tail_sampling" in kinds and "batch" in kinds
    assert kinds.index("tail_sampling") < kinds.index("batch"), "batch after sampling (Collector docs)"
    assert [_kind(e) for e in pipeline["exporters"]] == ["otlphttp"]


def test_tail_sampling_keeps_errors_and_samples_the_rest():
    config = _config()
    (name,) = [p for p in config["processors"] if _kind(p) == "tail_sampling"]
    policies = config["processors"][name]["policies"]
    by_type = {p["type"]: p for p in policies}
    assert by_type["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    assert 0 < by_type["probabilistic"]["probabilistic"]["sampling_percentage"] <= 100
    assert all(p["name"] for p in policies)


def test_exporter_points_at_harvester_traces_path():
    config = _config()
    (name,) = [e for e in config["exporters"] if _kind(e) == "otlphttp"]
    exporter = config["exporters"][name]
    if "traces_endpoint" in exporter:  # used as given
        url = urlsplit(exporter["traces_endpoint"])
        assert url.path == "/v1/traces"
    else:  # the exporter appends /v1/traces to a base endpoint
        url = urlsplit(exporter["endpoint"])
        assert url.path in ("", "/")
    assert url.scheme in ("http", "https") and url.port == 4318
    assert exporter.get("compression", "gzip") in ("gzip", "none")  # what `harvester serve` decodes
    assert exporter.get("encoding", "proto") in ("proto", "json")
