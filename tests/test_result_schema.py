"""The result's JSON Schema: generated from the typed result (``result.py``), committed as
``docs/result.schema.json``, and met by every sample's ``diagnose --json`` and by a
``compare --json`` of two samples."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from traceinsight import result_schema
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.result import DiagnosisResult

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
COMMITTED = REPO / "docs" / "result.schema.json"
SAMPLE_NAMES = sorted(
    p.name for p in SAMPLES.iterdir() if p.name.startswith(("synthetic_", "cpu_"))
)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(COMMITTED.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DiagnosisResult]:
    tmp = tmp_path_factory.mktemp("results")
    return {
        n: diagnose(ingest([SAMPLES / n], tmp / f"{n}.tistore", quiet=True), cache=False)
        for n in SAMPLE_NAMES
    }


def test_the_committed_schema_is_the_generated_one() -> None:
    assert COMMITTED.read_text() == result_schema.text(), (
        "docs/result.schema.json is stale: python -m traceinsight.result_schema --schema "
        "> docs/result.schema.json"
    )


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_sample_result_meets_the_schema(
    validator: jsonschema.Draft202012Validator, results: dict[str, DiagnosisResult], name: str
) -> None:
    data = json.loads(results[name].to_json())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []


def test_a_compare_result_meets_the_schema(
    validator: jsonschema.Draft202012Validator, results: dict[str, DiagnosisResult]
) -> None:
    c = compare(results["synthetic_h100_healthy.json.gz"], results["synthetic_mi300x.json.gz"])
    data = json.loads(json.dumps(c, default=str))
    assert data["schema"] == "traceinsight.compare"
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []


def test_the_schema_rejects_a_wrong_type(
    validator: jsonschema.Draft202012Validator, results: dict[str, DiagnosisResult]
) -> None:
    # the schema holds the typed sections: a rank's kernel time as text is refused
    data = json.loads(results["synthetic_h100_healthy.json.gz"].to_json())
    data["summary"]["ranks"][0]["kernel_time_ns"] = "812 ms"
    assert not validator.is_valid(data)
    data = json.loads(results["synthetic_h100_healthy.json.gz"].to_json())
    data["metrics"]["values"]["gpu_busy_pct"] = "high"
    assert not validator.is_valid(data)
