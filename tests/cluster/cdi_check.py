#!/usr/bin/env python3
"""Validates CDI specs against tests/cluster/cdi.schema.json (JSON Schema draft 7).

usage: cdi_check.py SCHEMA SPEC...
Prints one line per spec, "SPEC: valid" or "SPEC: invalid: WHY" (the first error, with its
place in the document), and exits 0 when every spec is valid, 1 when one is not, 2 when the
schema itself is not a valid draft-7 schema, 3 when the jsonschema module is missing.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("the Python module jsonschema is missing (Debian: python3-jsonschema)")
    sys.exit(3)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    try:
        jsonschema.Draft7Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        print(f"{sys.argv[1]}: not a draft-7 schema: {e.message}")
        return 2
    validator = jsonschema.Draft7Validator(schema)
    bad = 0
    for path in sys.argv[2:]:
        try:
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: invalid: not JSON: {e}")
            bad += 1
            continue
        errors = sorted(validator.iter_errors(spec), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(top)"
            print(f"{path}: invalid: at {where}: {errors[0].message}")
            bad += 1
        else:
            print(f"{path}: valid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
