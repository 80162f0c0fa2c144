"""Sum the per-process files of the packed-volume probe (see sitecustomize.py here) into one table."""
import collections
import json
import sys
from pathlib import Path

totals = collections.defaultdict(lambda: [0, 0, 0])
for path in Path(sys.argv[1]).glob("*.json"):
    for kind, values in json.loads(path.read_text()).items():
        for i, v in enumerate(values):
            totals[kind][i] += v
print("| element shape | elements | pickled MB |\n|---|---|---|")
for kind, (n, size, _) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
    if size >= 1e5:
        print(f"| `{kind}` | {n:,} | {size / 1e6:,.1f} |")
print(f"| all | {sum(v[0] for v in totals.values()):,} | {sum(v[1] for v in totals.values()) / 1e6:,.1f} |")
