#!/usr/bin/env python3
"""Writes deploy/helm/rotor/values.schema.json from the binaries' --help, so that the chart's
`drainer.flags` and `selector.flags` accept exactly the flags the binaries take, with their
kinds: a switch is a boolean, a flag with possible values an enum, a duration a pattern, a flag
that repeats a string or a list. Each of `policies` gets the RotationPolicy CRD's schema of
`spec` (from the chart's crds/), closed to unknown fields, so that a misspelt field is refused
at install instead of being dropped by the API server. tests/tests/helm.rs checks the schema
against --help and the CRD again. Needs PyYAML (`python3 -m pip install pyyaml`).

    cargo build --workspace --bins && python3 tools/helm-schema.py [BIN_DIR [OUT]]

BIN_DIR holds the binaries (target/debug by default); OUT is where the schema goes (the chart's
values.schema.json by default).
"""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRD = ROOT / "deploy" / "helm" / "rotor" / "crds" / "rotationpolicies.rotor.dev.yaml"
TARGET = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "debug"
OUT = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "deploy" / "helm" / "rotor" / "values.schema.json"

# Set by the chart from other values, or meaningless after `run` (global options); and what the
# chart sets from the pod: each replica's own name as its identity (one name for both would make
# both lead), and the release's namespace for the Lease and the placeholders, where the chart's
# Roles are.
LEFT_OUT = {
    "help", "version", "log-format", "kubeconfig", "context",
    "identity", "lease-namespace", "surge-namespace",
}
REPEATABLE = {
    "window", "gate-ignore-namespace", "notify-webhook", "health-url",
    "group-label", "group", "exclude-group", "exclude-tag", "azure-resource-group",
}
DURATIONS = {
    "node-startup-grace", "drain-timeout", "force-after", "max-grace-period", "pending-grace",
    "gate-timeout", "budget-recheck", "blocked-after", "park-blocked-after", "settle", "replace-by-warning", "halt-after",
    "health-timeout", "health-interval", "surge-timeout", "lease-duration",
    "release-lease-after", "replace-within", "max-age", "aws-call-timeout", "gcp-call-timeout",
}
# jiff's friendly durations (30s, 1h30m, 2w, 500ms, 90 minutes) or ISO 8601 (PT15M, P30D).
DURATION_PATTERN = r"^(P[0-9.]*[DW]?(T[0-9.HMS]+)?|([0-9]+(\.[0-9]+)? *[a-z]+ *)+)$"
COUNT_OR_PERCENT = r"^[0-9]+%?$"


def options(help_text):
    """(name, takes_value, possible values, first sentence) of each long option."""
    found = []
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s+(?:-[a-zA-Z], )?--([a-z0-9-]+)( <[^>]+>)?\s*$", line)
        if not m:
            continue
        name, takes_value = m.group(1), m.group(2) is not None
        body = []
        for nxt in lines[i + 1:]:
            if re.match(r"^\s+(?:-[a-zA-Z], )?--[a-z0-9-]+", nxt):
                break
            body.append(nxt.strip())
        text = " ".join(b for b in body if b)
        values = re.findall(r"^- ([A-Za-z0-9_-]+):", "\n".join(body), re.M)
        sentence = re.split(r"(?<=[.;])\s", text.split("Possible values:")[0].split(" [")[0])[0]
        found.append((name, takes_value, values, sentence.strip()))
    return found


def flag_schema(name, takes_value, values, description):
    if not takes_value:
        return {"type": "boolean", "description": description}
    if values:
        one = {"type": "string", "enum": values}
    elif name in DURATIONS:
        one = {"type": "string", "pattern": DURATION_PATTERN}
    elif name in {"max-concurrent"}:
        one = {"type": "integer", "minimum": 1}
    elif name in {"surge-ahead"}:
        one = {"type": "integer", "minimum": 0}
    elif name in {"max-unavailable", "max-surge", "max-tainted", "max-tainted-per-group"}:
        one = {"type": ["string", "integer"], "pattern": COUNT_OR_PERCENT, "minimum": 0}
    else:
        one = {"type": "string", "minLength": 1}
    if name in REPEATABLE:
        one = {"anyOf": [one, {"type": "array", "items": one}]}
    # null leaves the flag out (it removes a default of values.yaml).
    return {"anyOf": [one, {"type": "null"}], "description": description}


def flags(command):
    # No ROTOR_* variable of whoever runs it may show up in the help.
    text = subprocess.run(command, check=True, capture_output=True, text=True,
                          env={"NO_COLOR": "1"}).stdout
    props = {}
    for name, takes_value, values, description in options(text):
        if name not in LEFT_OUT:
            props[name] = flag_schema(name, takes_value, values, description)
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": dict(sorted(props.items())),
    }


def values_schema(crd_schema):
    """A CRD's OpenAPI schema as a values schema (JSON Schema draft 7): `nullable` becomes a
    `null` type; what does not validate is left out (`format`, `description`, `default`, and
    the `x-kubernetes-*` extensions, whose CEL rules the API server still applies), so that a
    reworded description does not make the values schema stale; and every object with
    properties refuses the fields it does not name, which the API server would silently drop."""
    if isinstance(crd_schema, list):
        return [values_schema(s) for s in crd_schema]
    if not isinstance(crd_schema, dict):
        return crd_schema
    out = {}
    for key, value in crd_schema.items():
        if key in ("format", "nullable", "description", "default") or key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: values_schema(s) for name, s in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = values_schema(value)
        else:
            out[key] = value
    if crd_schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def policy_spec_schema():
    """The `spec` of the RotationPolicy CRD's served version, as a values schema."""
    try:
        import yaml
    except ImportError:
        sys.exit("tools/helm-schema.py reads the RotationPolicy CRD with PyYAML: "
                 "python3 -m pip install pyyaml")
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    return values_schema(version["schema"]["openAPIV3Schema"]["properties"]["spec"])


def main():
    drainer = flags([str(TARGET / "rotor-drainer"), "run", "--help"])
    selector = flags([str(TARGET / "rotor-selector"), "--help"])
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}

    def program(flags_schema, own):
        """The values both programs have (their flags, pod and ServiceAccount settings) and
        `own`, the program's alone."""
        return {
            "type": "object", "additionalProperties": False,
            "properties": {
                "logFormat": {"type": "string", "enum": ["text", "json"]},
                "flags": flags_schema,
                "env": {"type": "array", "items": {"type": "object", "required": ["name"]}},
                "serviceAccount": {"type": "object", "additionalProperties": False,
                                   "properties": {"annotations": string_map}},
                "podAnnotations": string_map,
                "podLabels": string_map,
                "resources": {"type": "object"},
                "nodeSelector": string_map,
                "tolerations": {"type": "array"},
                **own,
            },
        }
    schema = {
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "rotor chart values",
        "description": "Generated by tools/helm-schema.py from the binaries' --help and the RotationPolicy CRD; do not edit by hand.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "global": {"type": "object"},
            "image": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "repository": {"type": "string", "minLength": 1},
                    "tag": {"type": "string"},
                    "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
                },
            },
            "imagePullSecrets": {"type": "array"},
            "drainer": program(drainer, {
                "replicas": {"type": "integer", "minimum": 0},
                "priorityClassName": {"type": "string"},
                "pdb": {"type": "object", "additionalProperties": False,
                        "properties": {"maxUnavailable": {"type": ["integer", "string"]}}},
            }),
            "selector": program({**selector, "required": ["provider"]}, {
                "enabled": {"type": "boolean"},
                "schedule": {"type": "string", "minLength": 1},
                "timeZone": {"type": "string", "minLength": 1},
                "suspend": {"type": "boolean"},
                "aws": {"type": "object", "additionalProperties": False,
                        "properties": {"region": {"type": "string"}}},
            }),
            "policies": {
                "type": "array",
                "description": "RotationPolicies to create (docs/policy.md): each spec is rendered as written.",
                "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["name", "spec"],
                    "properties": {
                        # A DNS subdomain, as the API server requires of a name.
                        "name": {"type": "string", "maxLength": 253,
                                 "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
                        "spec": policy_spec_schema(),
                    },
                },
            },
            "surge": {"type": "object", "additionalProperties": False,
                      "properties": {"createPriorityClass": {"type": "boolean"}}},
            "monitoring": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "podMonitor": {"type": "object", "additionalProperties": False,
                                   "properties": {"enabled": {"type": "boolean"},
                                                  "labels": string_map,
                                                  # Empty: Prometheus's own interval.
                                                  "interval": {"type": "string",
                                                               "pattern": r"^([0-9]+(ms|s|m|h))*$"}}},
                    "prometheusRule": {"type": "object", "additionalProperties": False,
                                       "properties": {"enabled": {"type": "boolean"},
                                                      "labels": string_map}},
                    "grafanaDashboard": {"type": "object", "additionalProperties": False,
                                         "properties": {"enabled": {"type": "boolean"},
                                                        "labels": string_map}},
                },
            },
            # NetworkPolicy egress rules (networking.k8s.io/v1 NetworkPolicyEgressRule) the
            # operator adds; the API server checks their fields.
            "networkPolicy": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "enabled": {"type": "boolean"},
                    **{name: {"type": "object", "additionalProperties": False,
                              "properties": {"extraEgress": {
                                  "type": "array",
                                  "items": {"type": "object", "additionalProperties": False,
                                            "properties": {"to": {"type": "array"},
                                                           "ports": {"type": "array"}}}}}}
                       for name in ("drainer", "selector")},
                },
            },
        },
    }
    OUT.write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {OUT}: {len(drainer['properties'])} drainer flags, "
          f"{len(selector['properties'])} selector flags")


if __name__ == "__main__":
    main()
