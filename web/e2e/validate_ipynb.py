"""Validates a notebook the page wrote against nbformat's own JSON schema.

    /usr/bin/python3 web/e2e/validate_ipynb.py FILE.ipynb

Run by web/e2e/run.js with Debian's python3-nbformat (apt-get install -y
python3-nbformat; .ci/deps.sh test installs it). It checks the file twice:
against the nbformat 4.5 schema shipped in the nbformat package, with
jsonschema, every error listed; and with nbformat.validate, as Jupyter
does when it opens a file (cell ids unique, ...). On success it prints a
JSON summary of the notebook for run.js to compare with the page; on
failure it prints the errors and exits 1.
"""

import json
import os
import sys

import jsonschema
import nbformat


def main(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    errors = []
    if (nb.get("nbformat"), nb.get("nbformat_minor")) != (4, 5):
        errors.append("nbformat %r.%r, want 4.5" % (nb.get("nbformat"), nb.get("nbformat_minor")))
    schema_path = os.path.join(os.path.dirname(nbformat.__file__), "v4", "nbformat.v4.5.schema.json")
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    validator = jsonschema.Draft4Validator(schema)
    for e in sorted(validator.iter_errors(nb), key=lambda e: list(e.absolute_path)):
        errors.append("%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(top)", e.message))
    try:
        nbformat.validate(nbformat.reads(json.dumps(nb), as_version=nbformat.NO_CONVERT))
    except nbformat.ValidationError as e:
        errors.append("nbformat.validate: %s" % e.message)
    if errors:
        print("\n".join(errors))
        return 1
    summary = {
        "schema": schema_path,
        "nbformat_version": nbformat.__version__,
        "kernelspec": nb["metadata"].get("kernelspec"),
        "language_info": nb["metadata"].get("language_info"),
        "cells": [
            {
                "cell_type": c["cell_type"],
                "id": c["id"],
                "source": "".join(c["source"]) if isinstance(c["source"], list) else c["source"],
                "language": c["metadata"].get("aiod", {}).get("language"),
                "execution_count": c.get("execution_count"),
                "outputs": [o["output_type"] for o in c.get("outputs", [])],
            }
            for c in nb["cells"]
        ],
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: validate_ipynb.py FILE.ipynb", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
