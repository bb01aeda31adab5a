"""What every benchmark process measures about itself, shared by the peers' and the sweep's
drivers and workers: memory from /proc, CPU from getrusage, and matplotlib for the charts."""

import resource
import sys


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def proc_kib(field, path="/proc/self/status"):
    """The kB value of a "Field:" line of a /proc file (VmRSS:, VmHWM:, MemAvailable: in
    /proc/meminfo), 0 when absent."""
    with open(path) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def usage():
    """(CPU seconds, user + system, of this process and its waited-for children; minor page
    faults of this process)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime, s.ru_minflt


def pyplot(tag):
    """matplotlib.pyplot on the Agg backend, or None (said in one line) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log(f"{tag}: no charts ({e})")
        return None
    return plt
