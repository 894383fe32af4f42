#!/usr/bin/env python3
"""Writes deploy/helm/rotor/values.schema.json from the binaries' --help, so that the chart's
`drainer.flags` and `selector.flags` accept exactly the flags the binaries take, with their
kinds: a switch is a boolean, a flag with possible values an enum, a duration a pattern, a flag
that repeats a string or a list. tests/tests/helm.rs checks the schema against --help again.

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
TARGET = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "debug"
OUT = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "deploy" / "helm" / "rotor" / "values.schema.json"

# Set by the chart from other values, or meaningless after `run` (global options).
LEFT_OUT = {"help", "version", "log-format", "kubeconfig", "context"}
REPEATABLE = {
    "window", "gate-ignore-namespace", "notify-webhook", "health-url",
    "group-label", "group", "exclude-group", "exclude-tag",
}
DURATIONS = {
    "node-startup-grace", "drain-timeout", "force-after", "max-grace-period", "pending-grace",
    "gate-timeout", "budget-recheck", "blocked-after", "settle", "replace-by-warning", "halt-after",
    "health-timeout", "health-interval", "surge-timeout", "lease-duration",
    "release-lease-after", "replace-within", "max-age", "aws-call-timeout",
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
        "description": "Generated by tools/helm-schema.py from the binaries' --help; do not edit by hand.",
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
            "surge": {"type": "object", "additionalProperties": False,
                      "properties": {"createPriorityClass": {"type": "boolean"}}},
            "monitoring": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "prometheusRule": {"type": "object", "additionalProperties": False,
                                       "properties": {"enabled": {"type": "boolean"},
                                                      "labels": string_map}},
                    "grafanaDashboard": {"type": "object", "additionalProperties": False,
                                         "properties": {"enabled": {"type": "boolean"},
                                                        "labels": string_map}},
                },
            },
        },
    }
    OUT.write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {OUT}: {len(drainer['properties'])} drainer flags, "
          f"{len(selector['properties'])} selector flags")


if __name__ == "__main__":
    main()
