"""report.py RESULTS.tsv - the benchmark table (Markdown) and the targets, from bench/run.sh.

Each line of RESULTS.tsv: scenario, tool, seconds, cpu_seconds, bytes (tab-separated); a tool
that failed has "FAIL" as seconds. GB is 10^9 bytes. Per scenario and tool: the median GB/s
with min and max over the runs, and the median client CPU-seconds (user+system) per GB."""
import statistics
import sys
from collections import OrderedDict

TOOLS = OrderedDict([
    ("s3direct-mem", "s3direct API → memory"),
    ("s3direct-null", "s3direct cp → stdout (/dev/null)"),
    ("s3direct-file", "s3direct cp → file (/dev/shm)"),
    ("s3direct-put-mem", "s3direct API ← memory"),
    ("s3direct-put-file", "s3direct cp ← file (/dev/shm)"),
    ("s3direct-put-unsigned", "s3direct API ← memory, UNSIGNED-PAYLOAD"),
    ("curl8", "curl, 8 parallel ranges → /dev/null"),
    ("aws", "aws s3 cp (/dev/shm)"),
    ("boto3", "boto3 download_file / upload_file (/dev/shm)"),
])
SCENARIOS = ["GET rgw", "GET nginx", "PUT rgw"]


def load(path):
    data = OrderedDict()
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 5:
            continue
        scen, tool, secs, cpu, nbytes = f[:5]
        d = data.setdefault(scen, OrderedDict()).setdefault(tool, {"gbs": [], "cpu": [], "fail": 0})
        if secs == "FAIL":
            d["fail"] += 1
            continue
        secs, cpu, nbytes = float(secs), float(cpu), int(nbytes)
        d["gbs"].append(nbytes / 1e9 / secs)
        d["cpu"].append(cpu / (nbytes / 1e9))
    return data


def med(d, what="gbs"):
    return statistics.median(d[what]) if d and d[what] else None


def main():
    data = load(sys.argv[1])
    size = sys.argv[2] if len(sys.argv) > 2 else "?"
    print(f"Object size {size}, client on this machine (2 cores); GB = 10^9 bytes; "
          "median of the runs [min – max]; CPU = client user+system seconds per GB.\n")
    print("| scenario | client | GB/s median [min – max] | CPU-s/GB | runs |")
    print("|---|---|---|---|---|")
    for scen in SCENARIOS:
        for tool, d in data.get(scen, {}).items():
            name = TOOLS.get(tool, tool)
            if d["gbs"]:
                rate = f"{med(d):.3f} [{min(d['gbs']):.3f} – {max(d['gbs']):.3f}]"
                cpu = f"{med(d, 'cpu'):.2f}"
            else:
                rate, cpu = "failed", "–"
            runs = f"{len(d['gbs'])}" + (f" ({d['fail']} failed)" if d["fail"] else "")
            print(f"| {scen} | {name} | {rate} | {cpu} | {runs} |")

    print("\nTargets (s3direct against the others, medians from this run):\n")
    print("| target | s3direct client | measured | result |")
    print("|---|---|---|---|")
    rows = []

    def ratio(scen, tool, other, want):
        s, o = data.get(scen, {}).get(tool), data.get(scen, {}).get(other)
        if not s or not o or med(s) is None or med(o) is None:
            return f"n/a ({other if not o or med(o) is None else tool} missing)", "MISS"
        r = med(s) / med(o)
        return f"{r:.2f}×", "PASS" if r >= want else "MISS"

    for tool in ("s3direct-mem", "s3direct-null", "s3direct-file"):
        if tool in data.get("GET rgw", {}):
            rows.append(("GET RGW ≥ 0.9× parallel curl", tool) + ratio("GET rgw", tool, "curl8", 0.9))
            rows.append(("GET RGW ≥ 3× boto3", tool) + ratio("GET rgw", tool, "boto3", 3.0))
    for tool in ("s3direct-mem", "s3direct-null", "s3direct-file"):
        if tool in data.get("GET nginx", {}):
            rows.append(("GET nginx ≥ 0.9× parallel curl", tool) + ratio("GET nginx", tool, "curl8", 0.9))
            d = data["GET nginx"][tool]
            c = med(d, "cpu")
            rows.append(("GET nginx ≤ 0.35 client CPU-s/GB", tool,
                         f"{c:.2f}" if c is not None else "n/a",
                         "PASS" if c is not None and c <= 0.35 else "MISS"))
    for tool in ("s3direct-put-mem", "s3direct-put-file"):
        if tool in data.get("PUT rgw", {}):
            rows.append(("PUT RGW ≥ 3× boto3", tool) + ratio("PUT rgw", tool, "boto3", 3.0))
    for target, tool, measured, result in rows:
        print(f"| {target} | {TOOLS.get(tool, tool)} | {measured} | **{result}** |")


if __name__ == "__main__":
    main()
