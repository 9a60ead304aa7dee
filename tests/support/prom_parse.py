#!/usr/bin/env python3
"""Parses Prometheus text exposition on stdin with the official
prometheus_client parser and prints the samples as JSON (a parse error
exits non-zero), so the tests validate /metrics with a real parser."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

families = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    families[family.name] = {
        "type": family.type,
        "samples": [[s.name, s.labels, s.value] for s in family.samples],
    }
json.dump(families, sys.stdout)
