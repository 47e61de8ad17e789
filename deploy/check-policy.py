#!/usr/bin/env python3
"""Evaluates the ValidatingAdmissionPolicy in deploy/admission-policy.yaml, as the API server's
admission chain would, on requests the agent might make, and checks each verdict.

Needs the PyPI packages cel-python and PyYAML. A CEL evaluation error counts as a denial
(failurePolicy: Fail). Exit status 0 when every case gets its expected verdict. Run by
tests/deploy/manifests.rs when cel-python is installed.
"""
import copy
import pathlib
import sys

import celpy
import yaml

POLICY = pathlib.Path(__file__).resolve().parent / "admission-policy.yaml"
AGENT = "system:serviceaccount:rollboot-agent:rollboot-agent"
CLAIM = "authentication.kubernetes.io/node-name"


def load_policy():
    for doc in yaml.safe_load_all(POLICY.read_text()):
        if doc and doc["kind"] == "ValidatingAdmissionPolicy":
            return doc["spec"]
    raise SystemExit("no ValidatingAdmissionPolicy in " + str(POLICY))


def evaluate(spec, request, obj, old):
    """'allow', 'not-matched' or 'deny: MESSAGE'."""
    env = celpy.Environment()
    act = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
    }

    def run(expr, activation):
        return env.program(env.compile(expr)).evaluate(activation)

    for c in spec.get("matchConditions", []):
        if not run(c["expression"], act):
            return "not-matched"
    variables = {}
    for v in spec.get("variables", []):
        variables[v["name"]] = run(v["expression"], dict(act, variables=celpy.json_to_cel(variables)))
    act["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    for v in spec["validations"]:
        try:
            ok = run(v["expression"], act)
        except Exception as e:  # an evaluation error: failurePolicy Fail
            return f"deny: error in {v['expression']}: {e}"
        if isinstance(ok, celpy.CELEvalError):
            return f"deny: error in {v['expression']}: {ok}"
        if not (isinstance(ok, celpy.celtypes.BoolType) and bool(ok)):
            return "deny: " + v.get("message", v.get("messageExpression", ""))
    return "allow"


def node(name, annotations=None, labels=None, unschedulable=False):
    n = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "7"},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {"nodeInfo": {"bootID": "b1"}},
    }
    if annotations is not None:
        n["metadata"]["annotations"] = annotations
    if labels is not None:
        n["metadata"]["labels"] = labels
    if unschedulable:
        n["spec"]["unschedulable"] = True
    return n


def update(user, claim, old, new, sub=""):
    # kube-apiserver builds `request` from an AdmissionRequest with omitempty fields: an empty
    # subResource and an empty extra map are absent, not "" and {} (reading them is an error).
    request = {"operation": "UPDATE", "userInfo": {"username": user}}
    if sub:
        request["subResource"] = sub
    if claim:
        request["userInfo"]["extra"] = {CLAIM: [claim]}
    return request, new, old


def with_ann(n, **changes):
    m = copy.deepcopy(n)
    ann = m["metadata"].setdefault("annotations", {})
    for k, v in changes.items():
        key = "rollboot.dev/" + k.replace("_", "-")
        if v is None:
            ann.pop(key, None)
        else:
            ann[key] = v
    return m


def main():
    spec = load_policy()
    base = node("n1", {"rollboot.dev/reboot": "t1", "other.io/x": "1"}, {"kubernetes.io/hostname": "n1"}, True)
    flagged = with_ann(base, reboot_required="2026-01-01T00:00:00Z", reboot_required_reason="sentinel file exists")
    relabelled = copy.deepcopy(base)
    relabelled["metadata"]["labels"]["rollboot.dev/exclude"] = "true"
    uncordoned = copy.deepcopy(base)
    del uncordoned["spec"]["unschedulable"]
    bare = node("n1")
    acked = with_ann(base, reboot_ack="t1")
    # A new token t2 issued after t1 was reported lost.
    reported_new = with_ann(acked, reboot_lost="t1", reboot="t2")
    foreign = copy.deepcopy(base)
    foreign["metadata"]["annotations"]["other.io/x"] = "2"
    cases = [
        ("flag own node", update(AGENT, "n1", base, flagged), "allow"),
        ("clear own flag", update(AGENT, "n1", flagged, base), "allow"),
        ("ack own token", update(AGENT, "n1", base, with_ann(base, reboot_ack="t1")), "allow"),
        ("flag a node without any annotations", update(AGENT, "n1", bare, with_ann(bare, reboot_required="now")), "allow"),
        ("flag another node", update(AGENT, "n2", base, flagged), "deny"),
        ("no node-name claim (no extra at all)", update(AGENT, None, base, flagged), "deny: the rollboot agent's token has no"),
        ("write the controller's reboot token", update(AGENT, "n1", base, with_ann(base, reboot="t2")), "deny"),
        ("remove the controller's token", update(AGENT, "n1", base, with_ann(base, reboot=None)), "deny"),
        ("write state", update(AGENT, "n1", base, with_ann(base, state="done")), "deny"),
        ("request a reboot", update(AGENT, "n1", base, with_ann(base, reboot_requested="now")), "deny"),
        ("change a foreign annotation", update(AGENT, "n1", base, foreign), "deny"),
        ("uncordon", update(AGENT, "n1", base, uncordoned), "deny"),
        ("label exclude", update(AGENT, "n1", base, relabelled), "deny"),
        ("status update", update(AGENT, "n1", base, flagged, sub="status"), "deny"),
        ("report its acknowledged token lost", update(AGENT, "n1", acked, with_ann(acked, reboot_lost="t1")), "allow"),
        ("report a token lost before acknowledging it", update(AGENT, "n1", base, with_ann(base, reboot_lost="t1")), "deny: the rollboot agent may set rollboot.dev/reboot-lost only"),
        ("report lost a token that is not the current one", update(AGENT, "n1", acked, with_ann(acked, reboot_lost="t0")), "deny: the rollboot agent may set rollboot.dev/reboot-lost only"),
        ("ack a new token with an old lost report", update(AGENT, "n1", reported_new, with_ann(reported_new, reboot_ack="t2")), "allow"),
        ("report lost on another node", update(AGENT, "n2", acked, with_ann(acked, reboot_lost="t1")), "deny"),
        ("refuse its token, saying why", update(AGENT, "n1", base, with_ann(base, reboot_refused='{"token":"t1","cause":"wrongHost"}')), "allow"),
        ("clear its refusal with the ack", update(AGENT, "n1", with_ann(base, reboot_refused="x"), with_ann(base, reboot_ack="t1")), "allow"),
        ("refuse on another node", update(AGENT, "n2", base, with_ann(base, reboot_refused="x")), "deny"),
        # The reboot history is the controller's record: an agent may neither forge nor erase it.
        ("write the reboot count", update(AGENT, "n1", base, with_ann(base, reboot_count="1")), "deny: the rollboot agent may only add or change"),
        ("write the last reboot", update(AGENT, "n1", base, with_ann(base, last_reboot="2026-01-01T00:00:00Z")), "deny: the rollboot agent may only add or change"),
        ("write the boot IDs of the last reboot", update(AGENT, "n1", base, with_ann(base, last_boot_id_before="b0", last_boot_id_after="b1")), "deny: the rollboot agent may only add or change"),
        ("erase the reboot history", update(AGENT, "n1", with_ann(base, reboot_count="2"), base), "deny: the rollboot agent may only remove"),
        ("flag own node with its history kept", update(AGENT, "n1", with_ann(base, reboot_count="2"), with_ann(flagged, reboot_count="2")), "allow"),
        # A shutdown it did not start: the agent asks for a drain, and withdraws the request.
        ("ask for a drain before its host shuts down", update(AGENT, "n1", base, with_ann(base, shutdown_requested="2026-01-01T00:00:00.000Z")), "allow"),
        ("withdraw its request for a drain", update(AGENT, "n1", with_ann(base, shutdown_requested="2026-01-01T00:00:00.000Z"), base), "allow"),
        ("ask for a drain of another node", update(AGENT, "n2", base, with_ann(base, shutdown_requested="2026-01-01T00:00:00.000Z")), "deny"),
        ("ask for a drain and cordon", update(AGENT, "n1", bare, with_ann(node("n1", unschedulable=True), shutdown_requested="x")), "deny"),
        ("write the operator's request reason", update(AGENT, "n1", base, with_ann(base, reboot_requested_reason="x")), "deny"),
        ("controller is not matched", update("system:serviceaccount:rollboot-system:rollboot-controller", None, base, with_ann(base, state="done")), "not-matched"),
    ]
    failures = 0
    for name, (req, new, old), want in cases:
        got = evaluate(spec, req, new, old)
        ok = got.split(":")[0] == want if ":" not in want else got.startswith(want)
        failures += not ok
        print(f"{'ok ' if ok else 'BAD'} {name}: {got}")
    print(f"policy: {len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
