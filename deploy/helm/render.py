#!/usr/bin/env python3
"""Renders deploy/helm/rollboot like `helm template rollboot deploy/helm/rollboot`, offline.

Uses the Helm library shipped by the PyPI package helm-python-sdk (`pip install
helm-python-sdk`), for machines without a helm binary. Prints the manifests; with --write,
writes them to deploy/helm/rollboot/rendered-default.yaml (the golden file the tests compare
with the Kustomize base). --values JSON overrides values (a JSON object merged over values.yaml).
--lint runs `helm lint --strict` and fails on any warning or error.
"""
import argparse
import json
import pathlib
import sys

from helm_python import chart

CHART = pathlib.Path(__file__).resolve().parent / "rollboot"
HEADER = (
    "# `helm template rollboot deploy/helm/rollboot` with default values, rendered offline by\n"
    "# deploy/helm/render.py --write. tests/deploy/manifests.rs checks it equals the Kustomize\n"
    "# base object by object, and that it is the chart's current render.\n"
)


def render(values):
    manifests = chart.Chart.load(str(CHART)).render(values, name="rollboot", namespace="rollboot-system", is_install=True)
    out = []
    for path in sorted(manifests):
        for doc in manifests[path].split("\n---\n"):
            doc = doc.strip("\n")
            if doc.startswith("---"):
                doc = doc[3:].strip("\n")
            if doc.strip() and not all(l.lstrip().startswith("#") or not l.strip() for l in doc.splitlines()):
                out.append(f"---\n# Source: {path}\n{doc}\n")
    return "".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--values", default=None)
    p.add_argument("--write", action="store_true")
    p.add_argument("--lint", action="store_true")
    a = p.parse_args()
    if a.lint:
        report = chart.lint(str(CHART), strict=True, kube_version="v1.30.0")
        bad = [m for m in report["messages"] if m["severity"] >= 2] + [{"error": e} for e in report["errors"]]
        for m in bad:
            print(m.get("path", ""), m["error"], file=sys.stderr)
        sys.exit(1 if bad else 0)
    text = render(json.loads(a.values) if a.values else None)
    if a.write:
        (CHART / "rendered-default.yaml").write_text(HEADER + text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
