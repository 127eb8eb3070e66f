"""Validating a manifest against a CustomResourceDefinition's schema as the API server would, without
one: the version's ``openAPIV3Schema`` (python-jsonschema; OpenAPI's subset of JSON Schema), fields the
schema does not name refused (``kubectl apply --validate=strict``), its ``default``s applied, then every
``x-kubernetes-validations`` rule evaluated where it stands (CEL, by cel-python)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``version`` in the CRD at ``path``."""
    crd = yaml.safe_load(path.read_text())
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def validation_errors(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What the API server would refuse in ``document`` (empty: it would be accepted)."""
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(schema).iter_errors(document)]
    errors += _unknown_fields(document, schema, "")
    if errors:
        return errors
    defaulted = copy.deepcopy(document)
    _apply_defaults(defaulted, schema)
    return _rule_errors(defaulted, schema, "")


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def _unknown_fields(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    if isinstance(value, dict) and "properties" in schema:
        known = schema["properties"]
        errors = [f"{where}/{k}: unknown field" for k in value if k not in known]
        for key, item in value.items():
            if key in known:
                errors += _unknown_fields(item, known[key], f"{where}/{key}")
        return errors
    if isinstance(value, list) and "items" in schema:
        return [e for i, item in enumerate(value) for e in _unknown_fields(item, schema["items"], f"{where}/{i}")]
    return []


def _apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _apply_defaults(value[key], sub)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _apply_defaults(item, schema["items"])


def _rule_errors(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    errors = []
    for rule in schema.get("x-kubernetes-validations", []):
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        result = program.evaluate({"self": celpy.json_to_cel(value)})
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):  # false, or an error value
            errors.append(f"{where or '/'}: {rule.get('message', rule['rule'])}")
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += _rule_errors(value[key], sub, f"{where}/{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += _rule_errors(item, schema["items"], f"{where}/{i}")
    return errors
