#!/usr/bin/env python3
"""bench_plot.py: the Python half of scripts/bench.

  bench_plot.py record --records FILE --kind KIND [--out F --err F --rc N | --skip REASON] [--set K=V ...]
      parse one run's output (sockperf, iperf3 -J, emp-pingpong/emp-bw/emp-rawbench --json)
      into one JSON line of FILE; progress line on stderr; on failure print the reason
      on stdout and exit 1
  bench_plot.py report --records FILE --out DIR [--meta K=V ...]
      write DIR/bench.json, print the ratio table, draw DIR/*.png
  bench_plot.py plot DIR/bench.json [--out DIR]
      redraw the PNGs from an existing bench.json

Plots follow the EMP thesis figures 2.7 and 3.1: latency (us) and bandwidth (Mbit/s)
against message size on a log x axis, one line per system.
"""
import argparse
import json
import math
import os
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SYS_LABEL = {"kernel": "kernel TCP", "emp_sockets": "EMP sockets", "native_emp": "native EMP", "raw": "raw frames"}


# ---------------------------------------------------------------- helpers
def value(s):
    if s in ("null", ""):
        return None
    if s == "true":
        return True
    if s == "false":
        return False
    if re.fullmatch(r"-?[0-9]+", s):
        return int(s)
    if re.fullmatch(r"-?[0-9]*\.[0-9]+([eE][-+]?[0-9]+)?|-?[0-9]+[eE][-+]?[0-9]+", s):
        return float(s)
    return s


def kv(items, strings=()):
    d = {}
    for it in items or []:
        k, _, v = it.partition("=")
        d[k] = v if k in strings and v not in ("", "null") else value(v)
    return d


def read(path):
    try:
        with open(path, errors="replace") as f:
            return ANSI.sub("", f.read())
    except (OSError, TypeError):
        return ""


def reason(out, err, rc, secs=None):
    """The most telling line of a failed run."""
    lines = [l.strip() for l in (err + "\n" + out).splitlines() if l.strip()]
    pick = None
    for pat in (r"^emp(-run|-rawbench|-bw|-pingpong)?:", r"\bemp:", r"ERROR|[Ee]rror|failed|refused|reset|timed out"):
        for l in lines:
            if re.search(pat, l):
                pick = l
                break
        if pick:
            break
    if not pick and lines:
        pick = lines[-1]
    pick = (pick or "no output").replace('"error":', "").strip().strip('",')
    if rc in (124, 137):
        pick = "timed out after %ss (%s)" % (secs or "?", pick)
    elif rc not in (0, None):
        pick = "exit %d: %s" % (rc, pick)
    return pick[:240]


def fnum(v, fmt="%.2f", none="-"):
    if v is None:
        return none
    if isinstance(v, str):
        return v
    return fmt % v


def size_label(b):
    if b is None:
        return "-"
    b = int(b)
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return "%dM" % (b >> 20)
    if b >= 1024 and b % 1024 == 0:
        return "%dK" % (b >> 10)
    return str(b)


# ---------------------------------------------------------------- parsers
def parse_sockperf(out):
    r = {}
    m = re.search(r"avg-latency=([0-9.]+)(?: \(std-dev=([0-9.]+)\))?", out)
    if not m:
        m2 = re.search(r"Summary: Latency is ([0-9.]+) usec", out)
        if not m2:
            raise ValueError("no latency summary in sockperf output")
        r["avg_us"] = float(m2.group(1))
    else:
        r["avg_us"] = float(m.group(1))
        if m.group(2):
            r["stddev_us"] = float(m.group(2))
    m = re.search(r"Total ([0-9]+) observations", out)
    if m:
        r["observations"] = int(m.group(1))
    pct = {}
    for p, v in re.findall(r"percentile ([0-9.]+) = *([0-9.]+)", out):
        pct[p.rstrip("0").rstrip(".")] = float(v)
    r["p50_us"] = pct.get("50")
    r["p99_us"] = pct.get("99")
    r["percentiles_us"] = pct
    m = re.search(r"<MIN> observation = *([0-9.]+)", out)
    if m:
        r["min_us"] = float(m.group(1))
    m = re.search(r"<MAX> observation = *([0-9.]+)", out)
    if m:
        r["max_us"] = float(m.group(1))
    if r["p50_us"] is None or r["p99_us"] is None:
        raise ValueError("no percentiles in sockperf output")
    return r


def parse_iperf3(out):
    try:
        j = json.loads(out)
    except ValueError:
        raise ValueError("iperf3 printed no JSON")
    if j.get("error"):
        raise ValueError("iperf3: " + j["error"])
    e = j.get("end", {})
    rcv, snd = e.get("sum_received"), e.get("sum_sent")
    if not rcv or not rcv.get("bytes"):
        raise ValueError("iperf3: no bytes received")
    r = {
        "mbps": rcv["bits_per_second"] / 1e6,
        "bytes": int(rcv["bytes"]),
        "duration_s": rcv.get("seconds"),
        "sender_mbps": snd["bits_per_second"] / 1e6 if snd else None,
        "retransmits": snd.get("retransmits") if snd else None,
    }
    cu = e.get("cpu_utilization_percent")
    if cu:
        r["iperf3_cpu_percent"] = {"client": cu.get("host_total"), "server": cu.get("remote_total")}
    return r


def parse_results(out):
    try:
        j = json.loads(out)
        res = j["results"]
    except (ValueError, KeyError, TypeError):
        raise ValueError("no complete --json output")
    if not res:
        raise ValueError("empty results")
    return {"results": res}


PARSERS = {"sockperf": parse_sockperf, "iperf3": parse_iperf3, "emp-pingpong": parse_results,
           "emp-bw": parse_results, "raw_pingpong": parse_results, "raw_blast": parse_results}


def progress(r):
    k, s, sc = r["kind"], SYS_LABEL.get(r.get("system"), r.get("system")), r.get("scenario")
    if k == "sockperf":
        what = "sockperf %s %s B" % (s, r.get("size"))
        val = "avg %.2f us, p50 %.2f, p99 %.2f" % (r["avg_us"], r["p50_us"], r["p99_us"]) if "error" not in r else None
    elif k == "iperf3":
        what = "iperf3 %s -l %s -P %s%s" % (s, size_label(r.get("write_size")), r.get("streams"),
                                            " -R" if r.get("reverse") else "")
        val = None
        if "error" not in r:
            val = "%.0f Mbit/s" % r["mbps"]
            c = r.get("cpu") or {}
            if c.get("sender_s_per_gb") is not None and c.get("receiver_s_per_gb") is not None:
                val += ", CPU %.2f/%.2f s/GB (sender/receiver)" % (c["sender_s_per_gb"], c["receiver_s_per_gb"])
    elif k in ("emp-pingpong", "emp-bw"):
        what = "%s %s B" % (k, r.get("size"))
        val = None
        if "error" not in r:
            x = r["results"][0]
            val = "%.2f us" % x["half_rtt_us"] if k == "emp-pingpong" else "%.0f Mbit/s" % x["mbps"]
    elif k == "raw_pingpong":
        what = "raw frames ping-pong"
        val = ", ".join("%d B %.2f us (median; mean %.2f)" % (x["size"], x["half_rtt_us"], x["mean_us"])
                        for x in r["results"]) if "error" not in r else None
    elif k == "raw_blast":
        what = "raw frames blast"
        val = ", ".join("%d B %.0f Mbit/s" % (x["size"], x["mbps"]) for x in r["results"]) if "error" not in r else None
    else:
        return
    sys.stderr.write("bench:   %s: %s\n" % (what, val if val is not None else "FAILED: " + r["error"]))


def cmd_record(a):
    r = {"kind": a.kind}
    r.update(kv(a.set))
    if a.kind in ("scenario", "emp_status"):
        pass
    elif a.skip is not None:
        r["error"] = a.skip
        r["skipped"] = True
    else:
        out, err = read(a.out), read(a.err)
        r["output"] = os.path.basename(a.out)
        r["rc"] = a.rc
        try:
            if a.rc != 0:
                raise ValueError("run failed")
            r.update(PARSERS[a.kind](out))
        except ValueError as ex:
            why = reason(out, err, a.rc, r.get("timeout_s"))
            if a.rc == 0:
                why = "%s (%s)" % (ex, why) if why != "no output" else str(ex)
            r["error"] = why
        notes = [l.strip() for l in err.splitlines() if re.match(r"\s*emp(-run)?:", l)]
        if notes:
            r["stderr_emp"] = notes[:5]
        if "error" not in r and a.kind == "iperf3":
            gb = r["bytes"] / 1e9
            c = {"client_s": r.pop("client_cpu_s", None), "server_s": r.pop("server_cpu_s", None),
                 "machine_s": r.pop("machine_cpu_s", None)}
            snd, rcv = ("server_s", "client_s") if r.get("reverse") else ("client_s", "server_s")
            c["sender_s"], c["receiver_s"] = c[snd], c[rcv]
            for side in ("client", "server", "sender", "receiver", "machine"):
                v = c[side + "_s"]
                c[side + "_s_per_gb"] = round(v / gb, 4) if v is not None and gb > 0 else None
            c["gb_moved"] = round(gb, 4)
            r["cpu"] = c
            # whole machine (perf stat -a) around the run, per MB moved
            mb = r["bytes"] / 1e6
            sc, cs = r.pop("machine_syscalls", None), r.pop("machine_cswitches", None)
            r["per_mb"] = {"syscalls": round(sc / mb, 1) if sc is not None and mb > 0 else None,
                           "cswitches": round(cs / mb, 1) if cs is not None and mb > 0 else None}
            # never report a kernel number as EMP's: strict mode should refuse, check the wire too
            if r.get("system") == "emp_sockets" and (r.get("emp_wire_bytes") or 0) < 0.9 * r["bytes"]:
                r["error"] = "EMP frames carried only %s of the %d bytes iperf3 moved" % (r.get("emp_wire_bytes"), r["bytes"])
        if "error" not in r and a.kind == "sockperf" and r.get("system") == "emp_sockets":
            need = (r.get("observations") or 0) * (r.get("msg_size") or 0)
            if (r.get("emp_wire_bytes") or 0) < need:
                r["error"] = "EMP frames carried only %s bytes for %s messages" % (r.get("emp_wire_bytes"), r.get("observations"))
    with open(a.records, "a") as f:
        f.write(json.dumps(r) + "\n")
    progress(r)
    if "error" in r:
        print(r["error"])
        return 1
    return 0


# ---------------------------------------------------------------- assemble
def assemble(records, meta):
    scen, order = {}, []
    for r in records:
        name = r.get("scenario")
        if name not in scen:
            scen[name] = {"name": name, "sockperf": [], "iperf3": [], "emp_pingpong": [], "emp_bw": [],
                          "raw_pingpong": [], "raw_blast": []}
            order.append(name)
        s = scen[name]
        k = r.pop("kind")
        r.pop("scenario", None)
        if k == "scenario":
            s.update({x: r.get(x) for x in ("group", "mtu", "rate", "offloads", "transport")})
        elif k == "emp_status":
            s["emp_sockets"] = {"available": r.get("available"), "reason": r.get("reason"),
                                "first_error": r.get("first_error")}
        elif k in ("sockperf", "iperf3"):
            s[k].append(r)
        elif k in ("emp-pingpong", "emp-bw"):
            key = k.replace("-", "_")
            if "error" in r:
                s[key].append({"size": r.get("size"), "error": r["error"]})
            else:
                for x in r["results"]:
                    x = dict(x)
                    x["iters"] = r.get("iters")
                    s[key].append(x)
        elif k in ("raw_pingpong", "raw_blast"):
            if "error" in r:
                s[k].append({"size": r.get("size"), "error": r["error"]})
            else:
                s[k].extend(r["results"])
    out = []
    for name in order:
        s = scen[name]
        es = s.setdefault("emp_sockets", {"available": False, "reason": "run did not finish"})
        emp_runs = [r for r in s["sockperf"] + s["iperf3"] if r.get("system") == "emp_sockets"]
        es["runs"] = len(emp_runs)
        es["failed_runs"] = sum(1 for r in emp_runs if "error" in r)
        if emp_runs and es["failed_runs"] == len(emp_runs) and es.get("available"):
            es["available"] = False
            es["reason"] = es.get("first_error") or emp_runs[0]["error"]
        s["ratios"] = ratios(s)
        out.append(s)
    meta = dict(meta)
    meta["notes"] = [
        "latency is half the round trip, in microseconds (sockperf reports half the RTT by default)",
        "ratio = EMP / kernel TCP: for latency and CPU lower is better, for bandwidth higher is better",
        "sockperf's messages are 14..65506 bytes (its header included): the 4 and 16 B points send 14 B, "
        "the 65536 B point sends 65506 B (msg_size); plots use msg_size",
        "bandwidth is what the receiver got (iperf3 sum_received), Mbit/s = 1e6 bit/s",
        "CPU: user+system seconds of the iperf3 client (all descendants) and server (all threads, "
        "delta over the run), per 1e9 bytes received; softirq work is charged to whatever process ran, "
        "so the sender/receiver split is approximate; machine_s is the whole machine's busy CPU "
        "(/proc/stat, softirq included, other load on the machine too)",
        "raw frames: emp-rawbench, one frame per system call; ping-pong half_rtt_us is the median",
        "both hosts share this machine's CPUs: unpinned, the scheduler may run client and server on one "
        "CPU (kernel TCP then skips a cross-CPU wakeup, EMP's busy-polling threads then compete) or on "
        "two; --pin puts h1 on CPU 0 and h2 on CPU 1 like two machines (see meta.placement)",
    ]
    return {"meta": meta, "scenarios": out}


def ok(r):
    return r is not None and "error" not in r


def ratio(e, k):
    if e is None or k is None or not k:
        return None
    return round(e / k, 4)


def ratios(s):
    lat = []
    by = {}
    for r in s["sockperf"]:
        by.setdefault(r["size"], {})[r["system"]] = r
    nat = {x.get("size"): x for x in s["emp_pingpong"]}
    for size in sorted(by):
        k, e = by[size].get("kernel"), by[size].get("emp_sockets")
        n = nat.get(size)
        row = {"size": size}
        for st in ("avg", "p50", "p99"):
            kk = k.get(st + "_us") if ok(k) else None
            ee = e.get(st + "_us") if ok(e) else None
            row[st] = ratio(ee, kk)
        row["native_avg"] = ratio(n["half_rtt_us"] if ok(n) else None, k.get("avg_us") if ok(k) else None)
        lat.append(row)
    bw, cpu = [], []
    byi = {}
    for r in s["iperf3"]:
        byi.setdefault((r["write_size"], r["streams"], bool(r.get("reverse"))), {})[r["system"]] = r
    natb = {x.get("size"): x for x in s["emp_bw"]}
    for key in sorted(byi):
        k, e = byi[key].get("kernel"), byi[key].get("emp_sockets")
        row = {"write_size": key[0], "streams": key[1], "reverse": key[2],
               "emp_sockets": ratio(e["mbps"] if ok(e) else None, k["mbps"] if ok(k) else None)}
        n = natb.get(key[0])
        if key[1] == 1 and not key[2]:
            row["native"] = ratio(n["mbps"] if ok(n) else None, k["mbps"] if ok(k) else None)
        bw.append(row)
        if ok(k) and ok(e):
            kc, ec = k["cpu"], e["cpu"]
            tot = lambda c: (c["sender_s_per_gb"] + c["receiver_s_per_gb"]) if c.get("sender_s_per_gb") is not None and c.get("receiver_s_per_gb") is not None else None
            cpu.append({"write_size": key[0], "streams": key[1], "reverse": key[2],
                        "sender": ratio(ec.get("sender_s_per_gb"), kc.get("sender_s_per_gb")),
                        "receiver": ratio(ec.get("receiver_s_per_gb"), kc.get("receiver_s_per_gb")),
                        "total": ratio(tot(ec), tot(kc))})
    return {"latency": lat, "bandwidth": bw, "cpu_per_gb": cpu}


# ---------------------------------------------------------------- table
def wire_desc(s):
    w = "switch shaped to %s" % s["rate"] if s.get("rate") else "veth pair"
    return "%s, MTU %s, offloads %s, EMP transport %s" % (w, s.get("mtu"), s.get("offloads"),
                                                          s.get("transport") or "afpacket")


def emp_line(s):
    es = s["emp_sockets"]
    if not es.get("runs") and es.get("reason"):
        return "EMP sockets: unavailable: %s" % es["reason"]
    if not es.get("available"):
        return "EMP sockets: unavailable: %s" % (es.get("reason") or es.get("first_error"))
    if es.get("failed_runs"):
        return "EMP sockets: ok via emp-run --strict, but %d of %d runs failed; first: %s" % (
            es["failed_runs"], es["runs"], es.get("first_error"))
    return "EMP sockets: ok (emp-run --strict on both sides, %d runs)" % es.get("runs", 0)


def cell(r, key, fmt):
    if r is None:
        return "-"
    if "error" in r:
        return "n/a" if r.get("skipped") else "FAIL"
    return fnum(r.get(key), fmt)


def rcell(v, fmt="%.2f"):
    return "-" if v is None else (fmt % v) + "x"


def table(doc):
    m = doc["meta"]
    L = []
    L.append("EMP sockets benchmark (%s)  %s  %s CPUs, Linux %s, %s  git %s" % (
        m.get("mode"), m.get("date"), m.get("nproc"), m.get("kernel"), m.get("cpu"), m.get("git")))
    L.append("CPU placement: %s; load average %s at the start, %s at the end (shared machine: noisy)" % (
        m.get("placement"), m.get("loadavg_start"), m.get("loadavg_end")))
    L.append("sockperf %s, iperf3 %s.  Ratio = EMP / kernel TCP: latency and CPU lower is better, "
             "bandwidth higher is better." % (m.get("sockperf"), m.get("iperf3")))
    for s in doc["scenarios"]:
        L.append("")
        L.append("== %s: %s ==" % (s["name"], wire_desc(s)))
        L.append(emp_line(s))
        # latency
        L.append("")
        L.append("Latency, half round trip (us): sockperf ping-pong --tcp; native = emp-pingpong (mean)")
        hdr = "%7s | %8s %8s %8s | %8s %8s %8s | %7s %7s %7s | %8s %7s" % (
            "size", "kern avg", "p50", "p99", "EMP avg", "p50", "p99", "r.avg", "r.p50", "r.p99", "native", "r.nat")
        L.append(hdr)
        L.append("-" * len(hdr))
        by = {}
        for r in s["sockperf"]:
            by.setdefault(r["size"], {})[r["system"]] = r
        nat = {x.get("size"): x for x in s["emp_pingpong"]}
        rat = {x["size"]: x for x in s["ratios"]["latency"]}
        odd = {}
        for size in sorted(set(by) | set(nat)):
            k, e, n = by.get(size, {}).get("kernel"), by.get(size, {}).get("emp_sockets"), nat.get(size)
            ra = rat.get(size, {})
            ms = (k or e or {}).get("msg_size", size)
            if ms != size:
                odd[size] = ms
            L.append("%7s | %8s %8s %8s | %8s %8s %8s | %7s %7s %7s | %8s %7s" % (
                size_label(size) + ("*" if ms != size else ""), cell(k, "avg_us", "%.2f"), cell(k, "p50_us", "%.2f"), cell(k, "p99_us", "%.2f"),
                cell(e, "avg_us", "%.2f"), cell(e, "p50_us", "%.2f"), cell(e, "p99_us", "%.2f"),
                rcell(ra.get("avg")), rcell(ra.get("p50")), rcell(ra.get("p99")),
                cell(n, "half_rtt_us", "%.2f"), rcell(ra.get("native_avg"))))
        if odd:
            L.append("* sockperf sent " + ", ".join("%s B for %s" % (v, size_label(k)) for k, v in sorted(odd.items()))
                     + " (its messages are 14..65506 B)")
        raw = [x for x in s["raw_pingpong"] if ok(x)]
        if raw:
            L.append("raw frames (emp-rawbench ping-pong, median [mean]): " + ", ".join(
                "%d B %.2f us [%.2f]" % (x["size"], x["half_rtt_us"], x["mean_us"]) for x in raw))
        # bandwidth
        L.append("")
        L.append("Bandwidth (Mbit/s): iperf3 -t %s; native = emp-bw one way, same message size; "
                 "CPU = s per GB, sender+receiver processes; machine = whole machine" % (s["iperf3"][0].get("seconds") if s["iperf3"] else "?"))
        hdr = "%-18s | %8s %8s %7s | %8s %7s | %11s %11s %7s | %11s | %13s %11s" % (
            "iperf3", "kernel", "EMP", "ratio", "native", "r.nat", "CPU kernel", "CPU EMP", "r.CPU", "machine K/E",
            "syscall/MB K/E", "cs/MB K/E")
        L.append(hdr)
        L.append("-" * len(hdr))
        byi = {}
        for r in s["iperf3"]:
            byi.setdefault((r["write_size"], r["streams"], bool(r.get("reverse"))), {})[r["system"]] = r
        natb = {x.get("size"): x for x in s["emp_bw"]}
        rb = {(x["write_size"], x["streams"], x["reverse"]): x for x in s["ratios"]["bandwidth"]}
        rc = {(x["write_size"], x["streams"], x["reverse"]): x for x in s["ratios"]["cpu_per_gb"]}

        def cpu(r):
            if not ok(r):
                return "-"
            c = r["cpu"]
            if c.get("sender_s_per_gb") is None or c.get("receiver_s_per_gb") is None:
                return "-"
            return "%.2f+%.2f" % (c["sender_s_per_gb"], c["receiver_s_per_gb"])

        def permb(r, what):
            v = (r.get("per_mb") or {}).get(what) if ok(r) else None
            return "-" if v is None else "%.0f" % v

        def mach(r):
            return "%.2f" % r["cpu"]["machine_s_per_gb"] if ok(r) and r["cpu"].get("machine_s_per_gb") is not None else "-"

        for key in sorted(byi):
            k, e = byi[key].get("kernel"), byi[key].get("emp_sockets")
            n = natb.get(key[0]) if key[1] == 1 and not key[2] else None
            L.append("%-18s | %8s %8s %7s | %8s %7s | %11s %11s %7s | %11s | %13s %11s" % (
                "-l %s -P %d%s" % (size_label(key[0]), key[1], " -R" if key[2] else ""),
                cell(k, "mbps", "%.0f"), cell(e, "mbps", "%.0f"), rcell(rb.get(key, {}).get("emp_sockets")),
                cell(n, "mbps", "%.0f"), rcell(rb.get(key, {}).get("native")),
                cpu(k), cpu(e), rcell(rc.get(key, {}).get("total")), "%s/%s" % (mach(k), mach(e)),
                "%s/%s" % (permb(k, "syscalls"), permb(e, "syscalls")),
                "%s/%s" % (permb(k, "cswitches"), permb(e, "cswitches"))))
        done = {key[0] for key in byi if key[1] == 1 and not key[2]}
        extra = [x for x in s["emp_bw"] if x.get("size") not in done]
        if extra:
            L.append("native EMP (emp-bw) at other sizes: " + ", ".join(
                "%s %s" % (size_label(x.get("size")), cell(x, "mbps", "%.0f")) for x in extra))
        blast = [x for x in s["raw_blast"] if ok(x)]
        if blast:
            L.append("raw frames (emp-rawbench --blast, received): " + ", ".join(
                "%d B %.0f Mbit/s" % (x["size"], x["mbps"]) for x in blast))
        # errors
        errs = []
        for r in s["sockperf"]:
            if "error" in r and not r.get("skipped"):
                errs.append("sockperf %s %s B: %s" % (SYS_LABEL.get(r["system"]), r["size"], r["error"]))
        for r in s["iperf3"]:
            if "error" in r and not r.get("skipped"):
                errs.append("iperf3 %s -l %s -P %s%s: %s" % (SYS_LABEL.get(r["system"]), size_label(r["write_size"]),
                                                            r["streams"], " -R" if r.get("reverse") else "", r["error"]))
        for key in ("emp_pingpong", "emp_bw", "raw_pingpong", "raw_blast"):
            for x in s[key]:
                if "error" in x:
                    errs.append("%s %s: %s" % (key.replace("_", "-"), x.get("size") or "", x["error"]))
        if errs:
            L.append("")
            L.append("failed runs (no number recorded):")
            L.extend("  " + x for x in errs[:20])
            if len(errs) > 20:
                L.append("  ... and %d more (bench.json)" % (len(errs) - 20))
    L.append("")
    L.append("elapsed %ss" % m.get("elapsed_s"))
    return "\n".join(L)


# ---------------------------------------------------------------- plots
def plots(doc, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    m = doc["meta"]
    style = {"kernel": dict(color="tab:blue", marker="o"), "emp_sockets": dict(color="tab:red", marker="s"),
             "native_emp": dict(color="tab:green", marker="^"), "raw": dict(color="tab:gray", marker="x")}
    made = []

    def sizeaxis(ax, xs):
        ax.set_xscale("log", base=2)
        if xs:
            lo, hi = min(xs), max(xs)
            ticks = [2 ** i for i in range(int(math.floor(math.log2(lo))), int(math.ceil(math.log2(hi))) + 1)]
            if len(ticks) > 12:
                ticks = ticks[::2]
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.set_xlim(lo / 1.5, hi * 1.5)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v)))
        ax.grid(True, which="major", alpha=0.3)

    def title(s, what):
        d = (m.get("date") or "")[:10]
        return "%s\n%s, %s CPUs, Linux %s, MTU %s (offloads %s%s%s)" % (
            what, d, m.get("nproc"), m.get("kernel"), s.get("mtu"), s.get("offloads"),
            ", switch %s" % s["rate"] if s.get("rate") else "",
            ", hosts pinned to CPUs" if str(m.get("placement", "")).startswith("pinned") else "")

    def note(fig, s):
        es = s["emp_sockets"]
        if not es.get("available") or es.get("failed_runs"):
            fig.text(0.01, 0.01, emp_line(s)[:150], fontsize=7, color="tab:red")

    for s in doc["scenarios"]:
        sc = s["name"]
        # ---- latency: thesis fig 2.7, small messages and all sizes
        series = []
        for sysname in ("kernel", "emp_sockets"):
            pts = sorted((r.get("msg_size", r["size"]), r["avg_us"], r["p50_us"]) for r in s["sockperf"]
                         if r["system"] == sysname and ok(r))
            if pts:
                series.append((SYS_LABEL[sysname] + " (sockperf avg)", sysname, [p[0] for p in pts], [p[1] for p in pts], "-"))
                series.append((SYS_LABEL[sysname] + " (p50)", sysname, [p[0] for p in pts], [p[2] for p in pts], ":"))
        pts = sorted((x["size"], x["half_rtt_us"]) for x in s["emp_pingpong"] if ok(x))
        if pts:
            series.append(("native EMP (emp-pingpong)", "native_emp", [p[0] for p in pts], [p[1] for p in pts], "-"))
        pts = sorted((x["size"], x["half_rtt_us"]) for x in s["raw_pingpong"] if ok(x))
        if pts:
            series.append(("raw frames (emp-rawbench median)", "raw", [p[0] for p in pts], [p[1] for p in pts], "-"))
        if series:
            fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
            allx = sorted({x for se in series for x in se[2]})
            small = [x for x in allx if x <= 1024] or allx
            for ax, xs, sub in ((axes[0], small, "messages up to %s B" % size_label(max(small))),
                                (axes[1], allx, "all sizes")):
                lim = max(xs)
                for label, sysname, x, y, ls in series:
                    px = [a for a in x if a <= lim]
                    py = [b for a, b in zip(x, y) if a <= lim]
                    if not px:
                        continue
                    st = dict(style[sysname])
                    if ls == ":":
                        st = dict(color=st["color"], marker=None, alpha=0.6)
                    ax.plot(px, py, linestyle=ls, label=label, linewidth=1.6 if ls == "-" else 1.0, **st)
                sizeaxis(ax, xs)
                ax.set_xlabel("message size (bytes)")
                ys = [b for se in series for a, b in zip(se[2], se[3]) if a <= lim and b > 0]
                if ys and max(ys) / min(ys) > 20:
                    # one system far above the others: a log scale keeps the rest readable
                    ax.set_yscale("log")
                    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                    ax.yaxis.set_minor_locator(NullLocator())
                    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
                    ax.set_ylabel("latency, half round trip (us, log scale)")
                    ax.grid(True, which="major", axis="y", alpha=0.3)
                else:
                    ax.set_ylabel("latency, half round trip (us)")
                    ax.set_ylim(bottom=0)
                ax.set_title(sub, fontsize=10)
            h, lb = axes[1].get_legend_handles_labels()
            fig.legend(h, lb, fontsize=8, loc="lower center", ncol=3, frameon=False)
            fig.suptitle(title(s, "Latency (half round trip)"), fontsize=11)
            note(fig, s)
            fig.tight_layout(rect=(0, 0.13, 1, 1))
            p = os.path.join(outdir, "latency-%s.png" % sc)
            fig.savefig(p, dpi=110)
            plt.close(fig)
            made.append(p)
        # ---- bandwidth: thesis fig 3.1
        series = []
        for sysname in ("kernel", "emp_sockets"):
            for np_, ls in ((1, "-"), (4, "--")):
                pts = sorted((r["write_size"], r["mbps"]) for r in s["iperf3"]
                             if r["system"] == sysname and r["streams"] == np_ and not r.get("reverse") and ok(r))
                if pts:
                    series.append(("%s (iperf3 -P %d)" % (SYS_LABEL[sysname], np_), sysname, pts, ls))
        pts = sorted((x["size"], x["mbps"]) for x in s["emp_bw"] if ok(x))
        if pts:
            series.append(("native EMP (emp-bw)", "native_emp", pts, "-"))
        pts = sorted((x["size"], x["mbps"]) for x in s["raw_blast"] if ok(x))
        if pts:
            series.append(("raw frames (blast, frame size)", "raw", pts, "none"))
        if series:
            fig, ax = plt.subplots(figsize=(8, 5.6))
            for label, sysname, pts, ls in series:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=ls, label=label,
                        markersize=8 if ls == "none" else 6, **style[sysname])
            sizeaxis(ax, [p[0] for se in series for p in se[2]])
            ax.set_xlabel("message / write size (bytes)")
            ax.set_ylabel("bandwidth (Mbit/s)")
            ax.set_ylim(bottom=0)
            h, lb = ax.get_legend_handles_labels()
            fig.legend(h, lb, fontsize=8, loc="lower center", ncol=3, frameon=False)
            ax.set_title(title(s, "Bandwidth"), fontsize=10)
            note(fig, s)
            fig.tight_layout(rect=(0, 0.11, 1, 1))
            p = os.path.join(outdir, "bandwidth-%s.png" % sc)
            fig.savefig(p, dpi=110)
            plt.close(fig)
            made.append(p)
        # ---- host CPU per GB moved (iperf3): stacked sender + receiver, kernel TCP next to EMP sockets
        tests = sorted({(r["write_size"], r["streams"], bool(r.get("reverse"))) for r in s["iperf3"] if ok(r)})
        if tests:
            fig, ax = plt.subplots(figsize=(min(14, max(8, 0.45 * len(tests) + 2)), 5))
            width = 0.38
            for j, sysname in enumerate(("kernel", "emp_sockets")):
                snd, rcv = [], []
                for key in tests:
                    r = next((r for r in s["iperf3"] if ok(r) and r["system"] == sysname and
                              (r["write_size"], r["streams"], bool(r.get("reverse"))) == key), None)
                    c = r["cpu"] if r else {}
                    snd.append(c.get("sender_s_per_gb") or 0)
                    rcv.append(c.get("receiver_s_per_gb") or 0)
                xs = [i + (j - 0.5) * width for i in range(len(tests))]
                col = style[sysname]["color"]
                ax.bar(xs, snd, width, color=col, label="%s sender" % SYS_LABEL[sysname])
                ax.bar(xs, rcv, width, bottom=snd, color=col, alpha=0.45, hatch="//", edgecolor=col,
                       label="%s receiver" % SYS_LABEL[sysname])
            ax.set_xlim(-1, len(tests))
            ax.set_xticks(range(len(tests)))
            ax.set_xticklabels(["-l %s -P %d%s" % (size_label(k[0]), k[1], " -R" if k[2] else "") for k in tests],
                               fontsize=8, rotation=60 if len(tests) > 6 else 0, ha="right" if len(tests) > 6 else "center")
            ax.set_xlabel("iperf3 test")
            ax.set_ylabel("host CPU seconds per GB moved")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8, loc="best")
            ax.set_title(title(s, "Host CPU per GB moved (iperf3)"), fontsize=10)
            note(fig, s)
            fig.tight_layout(rect=(0, 0.03, 1, 1))
            p = os.path.join(outdir, "cpu-%s.png" % sc)
            fig.savefig(p, dpi=110)
            plt.close(fig)
            made.append(p)
    return made


def cmd_report(a):
    recs = []
    with open(a.records) as f:
        for line in f:
            line = line.strip()
            if line:
                recs.append(json.loads(line))
    doc = assemble(recs, kv(a.meta, strings=("iperf3", "sockperf", "git", "kernel", "cpu", "args", "date")))
    os.makedirs(a.out, exist_ok=True)
    try:
        doc["meta"]["plots"] = [os.path.basename(p) for p in plots(doc, a.out)]
    except Exception as ex:  # the numbers matter more than the pictures
        doc["meta"]["plots"] = []
        doc["meta"]["plot_error"] = "%s: %s" % (type(ex).__name__, ex)
        sys.stderr.write("bench: plotting failed: %s\n" % doc["meta"]["plot_error"])
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(table(doc))
    return 0


def cmd_plot(a):
    with open(a.json) as f:
        doc = json.load(f)
    for p in plots(doc, a.out or os.path.dirname(os.path.abspath(a.json))):
        print(p)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--records", required=True)
    r.add_argument("--kind", required=True, choices=sorted(PARSERS) + ["scenario", "emp_status"])
    r.add_argument("--out")
    r.add_argument("--err")
    r.add_argument("--rc", type=int, default=0)
    r.add_argument("--skip")
    r.add_argument("--set", nargs="*", default=[])
    p = sub.add_parser("report")
    p.add_argument("--records", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--meta", nargs="*", default=[])
    q = sub.add_parser("plot")
    q.add_argument("json")
    q.add_argument("--out")
    a = ap.parse_args()
    return {"record": cmd_record, "report": cmd_report, "plot": cmd_plot}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
