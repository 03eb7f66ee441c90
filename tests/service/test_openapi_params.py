"""The OpenAPI document carries each registered analysis's ``params`` as JSON Schema."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from fedstats.service.http.app import create_app
from fedstats.service.store import open_store
from fedstats.wire.registry import ANALYSES, config_for

# one valid task per registered analysis: its required params and privacy parameters
EXAMPLES: dict[str, dict[str, Any]] = {
    "exact-mean": {"params": {"clip": 10.0}, "privacy": {"epsilon": None}},
    "bitpushing-mean": {
        "params": {"low": 0.0, "high": 8.0, "method": "weighted"},
        "privacy": {"epsilon": 1.0},
    },
    "bitpushing-variance": {
        "params": {"low": 0.0, "high": 8.0, "mean_fraction": 0.3},
        "privacy": {"epsilon": 1.0},
    },
    "performance-gap": {"params": {"mechanism": "L"}, "privacy": {"epsilon": 2.0}},
    "heterogeneity": {
        "params": {"dim": 4, "statistic": "dispersion"},
        "privacy": {"epsilon": 3.0, "delta": 1e-6},
    },
    "fed-chi2": {"params": {"shape": [3, 2]}, "privacy": {"epsilon": None}},
    "fed-entropy": {"params": {"m": 5}, "privacy": {"epsilon": None}},
    "g-test": {
        "params": {"shape": [3, 2], "coupling": "independent"},
        "privacy": {"epsilon": None},
    },
}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = Path(tmp_path_factory.mktemp("openapi")) / "fedstats.db"
    store = open_store(f"sqlite:///{db}")
    try:
        app = create_app(store, run_driver=False)
        r = TestClient(app).get("/openapi.json")
        assert r.status_code == 200
        return dict(r.json())
    finally:
        store.close()


def _validator(doc: dict[str, Any], name: str) -> jsonschema.protocols.Validator:
    root = {"components": doc["components"], "$ref": f"#/components/schemas/{name}"}
    return jsonschema.Draft202012Validator(root)


def test_every_registered_analysis_has_its_params_schema(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    body = schemas["TaskBody"]["oneOf"]
    keyed = {
        (v["properties"]["analysis"]["const"], v["properties"]["version"]["const"]) for v in body
    }
    assert keyed == set(ANALYSES)
    assert set(EXAMPLES) == {name for name, _ in ANALYSES}, "add an example for a new analysis"
    # the signed envelope's task refers to it
    assert schemas["SignedTaskIn"]["properties"]["task"]["$ref"] == "#/components/schemas/TaskBody"
    for (name, version), spec in ANALYSES.items():
        params = schemas[f"Params_{name.replace('-', '_')}_v{version}"]
        from fedstats.wire.registry import resolve

        cls = resolve(spec.config)
        assert set(params["properties"]) == set(cls.param_names())
        assert params["additionalProperties"] is False
        # an option documented as a set of choices has them as its enum
        for opt in ("method", "mechanism", "coupling", "statistic"):
            if opt in params["properties"]:
                assert params["properties"][opt]["enum"], (name, opt)


@pytest.mark.parametrize("analysis", sorted(EXAMPLES))
def test_a_valid_example_of_each_analysis_validates_and_broken_ones_do_not(
    document: dict[str, Any], analysis: str
) -> None:
    ex = EXAMPLES[analysis]
    task = {"analysis": analysis, "version": 1, "params": ex["params"], "privacy": ex["privacy"]}
    # the example is valid for the analysis itself, in its short and its canonical (full) form
    full = config_for(task).to_params()
    check = _validator(document, "TaskBody")
    for params in (ex["params"], full):
        check.validate({**task, "params": params})
    # the schema refuses what the analysis refuses: an unknown key, a missing required option, a
    # wrong type, a choice that is not offered, and another analysis's shape
    schema = document["components"]["schemas"]
    required = schema[f"Params_{analysis.replace('-', '_')}_v1"].get("required", [])
    broken: list[dict[str, Any]] = [{**full, "no_such_option": 1}]
    if required:
        missing = copy.deepcopy(full)
        del missing[required[0]]
        broken.append(missing)
    for key, value in full.items():
        if isinstance(value, str):
            broken.append({**full, key: 3})
            break
    enums = {
        k: v["enum"]
        for k, v in schema[f"Params_{analysis.replace('-', '_')}_v1"]["properties"].items()
        if "enum" in v
    }
    for key in enums:
        broken.append({**full, key: "not-a-choice"})
    for params in broken:
        assert not check.is_valid({**task, "params": params}), params
    assert not check.is_valid({**task, "analysis": "no-such-analysis"})
