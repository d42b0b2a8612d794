#!/usr/bin/python3
"""Parses an OpenMetrics text exposition from stdin with prometheus_client's parser (the
reference parser of the Prometheus Python client) and prints its families as JSON:
[{"name", "type", "unit", "help", "samples": [{"name", "labels", "value"}]}].

A parse error exits 1 with the parser's message; a missing prometheus_client exits 2 (Debian:
apt-get install python3-prometheus-client). tests/util/mod.rs runs it."""

import json
import sys

try:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
except ImportError as e:
    print(f"prometheus_client is not installed ({e}): apt-get install python3-prometheus-client",
          file=sys.stderr)
    sys.exit(2)

try:
    families = [
        {
            "name": f.name,
            "type": f.type,
            "unit": f.unit,
            "help": f.documentation,
            "samples": [
                {"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples
            ],
        }
        for f in text_string_to_metric_families(sys.stdin.read())
    ]
except Exception as e:  # the parser raises ValueError and others
    print(f"not valid OpenMetrics: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
json.dump(families, sys.stdout)
