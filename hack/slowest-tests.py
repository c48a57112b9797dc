#!/usr/bin/env python3
"""Print the N slowest tests (setup, call and teardown together) of pytest JUnit XML reports:
`make test` runs the suite in two phases and shows the slowest of both at the end.

    hack/slowest-tests.py 20 .test-results/*.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def main(argv: list[str]) -> int:
    n, paths = int(argv[0]), argv[1:]
    cases = []
    total = 0.0
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            took = float(case.get("time", "0"))
            total += took
            cases.append((took, f"{case.get('classname', '')}::{case.get('name', '')}"))
    cases.sort(reverse=True)
    print(f"\n{n} slowest of {len(cases)} tests ({total / 60:.1f} min of test time in all):")
    for took, name in cases[:n]:
        print(f"{took:8.2f}s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
