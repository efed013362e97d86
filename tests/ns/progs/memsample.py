#!/usr/bin/env python3
# memsample.py: samples engine usage (empstat --json) and resident memory of processes until they exit; prints the peaks per process.
#   memsample.py EMPSTAT INTERVAL LABEL=PID:CONNS...
# One line per process: label, pid, connections, engine memory bytes, peak peers, peak transfer
# records, peak RSS (VmHWM) and RSS per connection.
import json, os, subprocess, sys, time


def status_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    empstat, interval = sys.argv[1], float(sys.argv[2])
    procs = []
    for a in sys.argv[3:]:
        label, rest = a.split("=", 1)
        pid, conns = rest.split(":")
        procs.append({"label": label, "pid": int(pid), "conns": int(conns), "mem": 0, "peers": 0,
                      "records": 0, "hwm": 0, "samples": 0})
    while True:
        alive = 0
        for p in procs:
            if not os.path.exists("/proc/%d" % p["pid"]):
                continue
            alive += 1
            hwm = status_kb(p["pid"], "VmHWM")
            if hwm:
                p["hwm"] = max(p["hwm"], hwm)
            try:
                out = subprocess.run([empstat, "--json", str(p["pid"])], capture_output=True, text=True,
                                     timeout=5).stdout
                for ep in json.loads(out).get("endpoints", []):
                    u = ep["usage"]
                    p["mem"] = max(p["mem"], u["memory_bytes"])
                    p["peers"] = max(p["peers"], u["peers"])
                    p["records"] = max(p["records"], u["records"])
                    p["samples"] += 1
            except (ValueError, KeyError, subprocess.SubprocessError):
                pass
        if not alive:
            break
        time.sleep(interval)
    print("%-10s %8s %6s %12s %6s %8s %10s %10s" % ("process", "pid", "conns", "engine_B", "peers",
                                                    "records", "peak_RSS", "RSS/conn"))
    for p in procs:
        per = p["hwm"] * 1024 // p["conns"] if p["conns"] else 0
        print("%-10s %8d %6d %12d %6d %8d %9dK %9dK" % (p["label"], p["pid"], p["conns"], p["mem"], p["peers"],
                                                    p["records"], p["hwm"], per // 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
