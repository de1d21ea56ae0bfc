#!/usr/bin/env python3
"""CTest driver for the conformance suite: generates the numpy cases into a temporary directory, then runs the
C++ conformance binary on them. Exits 77 (CTest SKIP_RETURN_CODE) when numpy is unavailable."""
import argparse
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("rest", nargs="*", help="extra arguments for the binary (e.g. --gtest_filter=...)")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("numpy is not installed for", sys.executable, "- skipping conformance")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="kiln-conformance-") as d:
        subprocess.run([sys.executable, os.path.join(here, "gen_cases.py"), d], check=True)
        env = dict(os.environ, KILN_CONFORMANCE_DATA=d)
        return subprocess.run([args.binary] + args.rest, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
