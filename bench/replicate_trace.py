#!/usr/bin/python3
"""Writes a large Kineto trace for the memory / speed benchmarks (docs/performance.md).

    bench/replicate_trace.py INPUT.json[.gz] OUTPUT.json SIZE_MB

Replicates INPUT's events along time (copy k shifted by k x the trace's span, correlation
ids shifted so that launches and kernels still pair up) until OUTPUT holds about SIZE_MB of
JSON, in Kineto's own layout: the host events of every copy first, then the device events
(kernels, copies, GPU annotations) — so the file is as far from start order as a real
Kineto trace of that length (a Python function after all the ops it contains, each GPU
stream's events long after their launches)."""
import gzip
import json
import sys

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync",
               "Kernel", "Memcpy", "Memset"}


def main():
    src, dst, size_mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    start = min(float(e["ts"]) for e in events)
    end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in events)
    span = end - start + 1000.0
    max_corr = max((int(e.get("args", {}).get("correlation", 0)) for e in events), default=0) + 1
    host = [e for e in events if e.get("cat") not in DEVICE_CATS]
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    one = sum(len(json.dumps(e)) + 2 for e in events)
    copies = max(1, int(size_mb * 1e6 / one))
    written = 0
    with open(dst, "w") as out:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        head.setdefault("distributedInfo", {"rank": 0, "world_size": 1, "backend": "nccl"})
        out.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        for group in (host, device):
            for k in range(copies):
                for e in group:
                    c = dict(e)
                    c["ts"] = round(float(e["ts"]) + k * span, 3)
                    args = e.get("args")
                    if args and "correlation" in args:
                        c["args"] = dict(args)
                        c["args"]["correlation"] = int(args["correlation"]) + k * max_corr
                    out.write(("" if first else ",\n") + json.dumps(c))
                    first = False
                    written += 1
        out.write("\n]}\n")
    print(f"{dst}: {copies} copies, {written} events")


if __name__ == "__main__":
    main()
