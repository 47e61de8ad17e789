#!/usr/bin/env python3
"""Checks the simulator's protobuf table (crates/rollboot-sim/src/sim/protobuf.rs) against Kubernetes' own facts.

    K8S_VENDOR=/path/to/vendor/k8s.io scripts/check-protobuf-table.py

K8S_VENDOR is a `k8s.io` source tree holding `api/` and `apimachinery/` (for instance the
`vendor/k8s.io` of a Kubernetes or microshift checkout). For every field of every message in
the table it checks, against `generated.proto`: that the number exists, the JSON name is the
proto field name, the type matches (string/bool/int32/int64/bytes, IntOrString, Quantity,
Time, FieldsV1, or the named nested message) and repeated/map agree; and against the Go
struct tags in the package's types: that `kept` fields are pointers or lack `omitempty`, and
`value` fields are not pointers. Prints one line per problem and a summary; exits 1 on any.
Fields the table leaves out are not reported (they are refused at run time).
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDOR = os.environ.get("K8S_VENDOR")
if not VENDOR:
    sys.exit("set K8S_VENDOR to a k8s.io source tree (with api/ and apimachinery/)")

PACKAGES = {
    "k8s.io.api.core.v1": "api/core/v1",
    "k8s.io.api.apps.v1": "api/apps/v1",
    "k8s.io.api.policy.v1": "api/policy/v1",
    "k8s.io.api.rbac.v1": "api/rbac/v1",
    "k8s.io.api.scheduling.v1": "api/scheduling/v1",
    "k8s.io.apimachinery.pkg.apis.meta.v1": "apimachinery/pkg/apis/meta/v1",
    "k8s.io.apimachinery.pkg.runtime": "apimachinery/pkg/runtime",
    "k8s.io.apimachinery.pkg.util.intstr": "apimachinery/pkg/util/intstr",
    "k8s.io.apimachinery.pkg.api.resource": "apimachinery/pkg/api/resource",
}
SCALARS = {"string": "Str", "bool": "Bool", "int32": "I32", "int64": "I64", "bytes": "Bytes"}
SPECIAL = {"IntOrString": "IntOrString", "Quantity": "Quantity", "Time": "Time",
           "FieldsV1": "Ty::FieldsV1"}


def proto_messages(pkg):
    """{message: {number: (name, label, type)}} of a package's generated.proto."""
    text = open(os.path.join(VENDOR, PACKAGES[pkg], "generated.proto")).read()
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for m in re.finditer(r"message (\w+) \{(.*?)\n\}", text, re.S):
        fields = {}
        for f in re.finditer(r"(optional|repeated)?\s*(map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*(\d+);",
                             m.group(2)):
            fields[int(f.group(4))] = (f.group(3), f.group(1) or "", f.group(2))
        out[m.group(1)] = fields
    return out


def go_tags(pkg):
    """{(struct, number): (go type, json tag)} from a package's Go struct tags."""
    out = {}
    for path in glob.glob(os.path.join(VENDOR, PACKAGES[pkg], "*.go")):
        if path.endswith("generated.pb.go") or "zz_" in os.path.basename(path):
            continue
        struct = None
        for line in open(path):
            m = re.match(r"type (\w+) struct", line)
            if m:
                struct = m.group(1)
                continue
            if struct is None:
                continue
            if line.startswith("}"):
                struct = None
                continue
            m = re.match(r"\s+(\w+)\s+(\S+)\s+`(.*)`", line)
            if m and "protobuf:" in m.group(3):
                number = int(re.search(r'protobuf:"([^"]*)"', m.group(3)).group(1).split(",")[1])
                json_tag = re.search(r'json:"([^"]*)"', m.group(3))
                out[(struct, number)] = (m.group(2), json_tag.group(1) if json_tag else "")
    return out


def main():
    src = open(os.path.join(ROOT, "crates/rollboot-sim/src/sim/protobuf.rs")).read()
    statics = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r'static (\w+): Message = Message \{\s*name: "([^"]+)",\s*fields: &\[(.*?)\],\s*\};',
        src, re.S)}
    problems, checked = [], 0
    for full, body in statics.values():
        pkg, name = full.rsplit(".", 1)
        proto = proto_messages(pkg).get(name)
        if proto is None:
            problems.append(f"{full}: no such message")
            continue
        tags = go_tags(pkg)
        for f in re.finditer(r'(value|kept|repeated|map|inline)\(\s*(\d+),\s*(?:"([^"]*)",\s*)?'
                             r'([^)]*?(?:\([^)]*\))?)\s*\)', body):
            helper, number, json_name, ty = f.group(1), int(f.group(2)), f.group(3), \
                f.group(4).strip().rstrip(",")
            checked += 1
            where = f"{full} field {number}"
            if number not in proto:
                problems.append(f"{where}: not in generated.proto")
                continue
            pname, label, ptype = proto[number]
            if helper != "inline" and json_name != pname:
                problems.append(f"{where}: JSON name {json_name}, proto name {pname}")
            want = "map" if ptype.startswith("map<") else label or "single"
            want = {"optional": "single"}.get(want, want)
            got = helper if helper in ("map", "repeated") else "single"
            if want != got:
                problems.append(f"{where} ({pname}): {helper}, proto {label} {ptype}")
            base = ptype.split(",")[-1].strip(" >") if ptype.startswith("map<") else ptype
            short = base.split(".")[-1]
            if base in SCALARS:
                if ty != SCALARS[base]:
                    problems.append(f"{where} ({pname}): type {ty}, proto {base}")
            elif short in SPECIAL:
                if ty != SPECIAL[short]:
                    problems.append(f"{where} ({pname}): type {ty}, proto {short}")
            else:
                inner = re.search(r"&(\w+)", ty)
                target = statics.get(inner.group(1), ("?",))[0] if inner else "?"
                if target.rsplit(".", 1)[-1] != short:
                    problems.append(f"{where} ({pname}): message {target}, proto {base}")
            # The envelope is never JSON: its Go tags say nothing about presence.
            envelope = pkg == "k8s.io.apimachinery.pkg.runtime"
            if helper in ("value", "kept") and (name, number) in tags and not envelope:
                gotype, json_tag = tags[(name, number)]
                pointer, omitempty = gotype.startswith("*"), "omitempty" in json_tag
                if helper == "kept" and not (pointer or not omitempty):
                    problems.append(f"{where} ({pname}): kept, but Go {gotype} `{json_tag}`")
                if helper == "value" and (pointer or (not omitempty and base in SCALARS)):
                    problems.append(f"{where} ({pname}): value, but Go {gotype} `{json_tag}`")
    for p in problems:
        print(p)
    print(f"{len(statics)} messages, {checked} fields checked, {len(problems)} problems")
    sys.exit(1 if problems else 0)


main()
