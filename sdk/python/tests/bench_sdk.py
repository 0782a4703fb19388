"""API overhead seen from Python (not a unit test: unittest skips bench_*).

    DRYEXEC_BIN=bin/dryexec /usr/bin/python3 sdk/python/tests/bench_sdk.py [N]

Prints medians: a trial of /bin/true through the SDK, a session shell exec
and a session ping, and a bare health round trip; compare with the Go
benchmarks of package server (BenchmarkTrialInProcess, …) of the same run.
"""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dry_exec  # noqa: E402


def median_ms(fn, n):
    fn()
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t) * 1000)
    return statistics.median(xs)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    c = dry_exec.Client()
    wd = tempfile.mkdtemp()
    print("health round trip      %7.3f ms" % median_ms(c.health, n * 5))
    print("trial /bin/true        %7.3f ms" % median_ms(lambda: c.run(["/bin/true"], cwd=wd), n))
    with c.session(rung="ns") as s:
        print("session ping           %7.3f ms" % median_ms(s.ping, n * 5))
        print("session shell 'true'   %7.3f ms" % median_ms(lambda: s.shell("true"), n))
    c.close()


if __name__ == "__main__":
    main()
