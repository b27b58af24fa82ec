"""The figures and markdown tables of ``tests.bench.s3``: requests by type, per partition and per
GB, bytes moved, walls, throughput, and a nightly run's projection with its formula spelled out."""

from __future__ import annotations

import argparse
import os
import statistics

MB, GB = 10**6, 10**9
FLEET = 10_000  # compacted partitions of the projected nightly run
OPS = ("LIST", "HEAD", "GET", "PUT", "COPY", "DELETE", "DELETE_BATCH", "MULTIPART", "OTHER")
PUT_CLASS = ("PUT", "COPY", "LIST", "MULTIPART", "DELETE_BATCH", "OTHER")  # POSTs (multipart, batched delete) too
GET_CLASS = ("GET", "HEAD")  # DELETE is free


def machine() -> dict:
    def field(path: str, name: str) -> str:
        try:
            with open(path) as f:
                return next((line.split(":", 1)[1].strip() for line in f if line.startswith(name)), "?")
        except OSError:
            return "?"

    memory = field("/proc/meminfo", "MemTotal").split()[0]  # kB
    return {"nproc": os.cpu_count(), "model": field("/proc/cpuinfo", "model name"),
            "memory_gb": round(int(memory) * 1024 / GB, 1) if memory.isdigit() else None}


def _median(runs: list[dict], key: str = "wall_s") -> float:
    return statistics.median(r[key] for r in runs)


def figures(results: dict, args: argparse.Namespace) -> list[dict]:
    """One dict per (corpus, command). Request counts are those of the first run with latency; the
    divisor of "per partition" is the log dir's compacted partitions for plan, the partitions it
    cleaned for compact."""
    out = []
    for name, commands in results["corpora"].items():
        m = results["manifests"][name]
        for command, runs in commands.items():
            first = runs["s3_latency"][0]
            requests = {op: first["requests"].get(op, 0) for op in OPS}
            total = sum(requests.values())
            partitions = m["compacted"] if command == "plan" else first["summary"][1]
            walls = {where: _median(rs) for where, rs in runs.items()}
            fixed = _median(results["tiny"][command])
            put = sum(requests[op] for op in PUT_CLASS) * FLEET / partitions
            get = sum(requests[op] for op in GET_CLASS) * FLEET / partitions
            out.append({
                "corpus": name, "command": command, "requests": requests, "total": total,
                "total_no_latency": sum(runs["s3"][0]["requests"].values()), "refused": first["refused"],
                "partitions": partitions, "per_partition": total / partitions, "per_gb": total / (m["log_bytes"] / GB),
                "bytes_in": first["bytes_in"], "bytes_out": first["bytes_out"], "walls": walls, "fixed_s": fixed,
                "mb_per_s": {w: m["log_bytes"] / MB / s for w, s in walls.items()},
                "records_per_s": {w: m["records"] / s for w, s in walls.items()},
                "fleet_requests": total * FLEET / partitions,
                "fleet_cost_usd": put / 1000 * args.put_price + get / 1000 * args.get_price,
                "driver_s": _median(runs["s3_latency"], "driver_s"),
                "fleet_s": fleet_seconds(walls["s3_latency"], _median(runs["s3_latency"], "driver_s"), fixed,
                                         partitions, args.executors),
            })
            if "seaweedfs" in runs:  # the same command on a real server, no added latency: beside moto's
                weed, moto = runs["seaweedfs"][0], runs["s3"][0]
                weed_partitions = m["compacted"] if command == "plan" else weed["summary"][1]
                out[-1]["seaweedfs"] = {
                    "requests": {op: weed["requests"].get(op, 0) for op in OPS},
                    "total": sum(weed["requests"].values()), "partitions": weed_partitions,
                    "per_partition": sum(weed["requests"].values()) / weed_partitions,
                    "wall_per_partition_s": walls["seaweedfs"] / weed_partitions,
                    "moto_per_partition": sum(moto["requests"].values()) / partitions,
                    "moto_wall_per_partition_s": walls["s3"] / partitions}
    return out


def fleet_seconds(wall: float, driver: float, fixed: float, partitions: int, executors: int) -> float:
    """A nightly run's wall over ``FLEET`` partitions: the fixed cost once, the commit stage (the
    driver's alone) per partition, the rest per partition shared by the executors."""
    shared = max(wall - fixed - driver, 0.0)
    return fixed + driver * FLEET / partitions + shared * FLEET / partitions / executors


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def render(results: dict, args: argparse.Namespace) -> str:
    mc, lat = results["machine"], f"+{args.latency_ms:g} ms"
    figs, ms = results["figures"], results["manifests"]
    ops = [op for op in OPS if op != "OTHER" or any(f["requests"]["OTHER"] for f in figs)]
    load = "{:.2f} {:.2f} {:.2f}".format
    lines = [
        "## kcompact on S3: requests, bytes, wall (tests/bench/s3.py)", "",
        f"machine: {mc['nproc']} cores (nproc), {mc['model']}, {mc['memory_gb']} GB memory; load average "
        f"before {load(*mc['load_before'])}, after {load(*mc['load_after'])}",
        "S3: moto behind tests.s3server.CountingS3 on 127.0.0.1, the command a child process "
        f"(`python -m kcompact.jobs.cli <command> s3://... --now <ms>`); {lat}: every request held that long; "
        f"local: the same command on a copy on local disk; walls: whole process, median of {args.runs} run(s)",
        "corpora: " + "; ".join(
            f"{name}: {m['compacted']} compacted partition(s), {m['log_bytes'] / GB:.3f} GB of .log, "
            f"{m['records']:,} records, --now {m['now']}" for name, m in ms.items()),
        "", f"### Requests by type (first run with {lat})", "",
        _table(["corpus", "command", *ops, "total", "total, no latency", "partitions", "per partition",
                "per GB of log"],
               [[f["corpus"], f["command"], *(f"{f['requests'][op]:,}" for op in ops), f"{f['total']:,}",
                 f"{f['total_no_latency']:,}", f"{f['partitions']:,}", f"{f['per_partition']:,.1f}",
                 f"{f['per_gb']:,.0f}"] for f in figs]),
        "", "partitions: plan, the log dir's compacted partitions (its delete-policy ones ride along); "
            "compact, the partitions it cleaned (its summary line). GB = 10^9 bytes of .log in the log dir.",
        "", f"### Bytes moved and wall (MB = 10^6 bytes; bytes of the first run with {lat})", "",
        _table(["corpus", "command", "MB in (to S3)", "MB out (from S3)", "S3 wall s", f"S3 {lat} wall s",
                "local wall s", f"fixed cost s (1 partition, S3 {lat})"],
               [[f["corpus"], f["command"], f"{f['bytes_in'] / MB:,.1f}", f"{f['bytes_out'] / MB:,.1f}",
                 f"{f['walls']['s3']:.1f}", f"{f['walls']['s3_latency']:.1f}", f"{f['walls']['local']:.1f}",
                 f"{f['fixed_s']:.1f}"] for f in figs]),
        "", "### Throughput (the log dir's .log bytes and records over the whole process's wall; MB = 10^6 bytes)", "",
        _table(["corpus", "command", "where", "MB/s", "records/s"],
               [[f["corpus"], f["command"], where, f"{f['mb_per_s'][key]:,.1f}", f"{f['records_per_s'][key]:,.0f}"]
                for f in figs for key, where in (("s3", "S3"), ("s3_latency", f"S3 {lat}"), ("local", "local"))]),
        "", f"### Projection: a nightly run over {FLEET:,} compacted partitions like these, "
            f"{args.executors} executors of {mc['nproc']} cores", "",
        f"requests = total / partitions x {FLEET:,}; cost = PUT, COPY, LIST, POST (multipart, batched delete) "
        f"requests / 1,000 x {args.put_price} USD + GET, HEAD / 1,000 x {args.get_price} USD (DELETE free); "
        f"time = fixed + commit x {FLEET:,} / partitions + max(0, wall - fixed - commit) x {FLEET:,} / partitions "
        f"/ {args.executors} (wall: S3 {lat}; commit: its commit stage, on the driver alone; fixed: the same "
        f"command on a log dir of 1 partition, S3 {lat})", "",
        _table(["corpus", "command", "requests per partition", "requests", "cost USD", "commit stage s", "time h"],
               [[f["corpus"], f["command"], f"{f['per_partition']:,.1f}", f"{f['fleet_requests']:,.0f}",
                 f"{f['fleet_cost_usd']:,.2f}", f"{f['driver_s']:.1f}", f"{f['fleet_s'] / 3600:,.2f}"] for f in figs]),
    ]
    weed = [f for f in figs if "seaweedfs" in f]
    if weed:
        lines += [
            "", "### moto and SeaweedFS (a real S3 server, tests/seaweedfs.py, no added latency), per partition", "",
            "requests counted where they arrive (moto: CountingS3; SeaweedFS: the proxy in front of it); "
            "per partition: as above (plan: compacted partitions; compact: cleaned partitions); walls: whole "
            "process, median", "",
            _table(["corpus", "command", "moto requests", "SeaweedFS requests", "moto per partition",
                    "SeaweedFS per partition", "moto wall s", "SeaweedFS wall s", "moto s per partition",
                    "SeaweedFS s per partition"],
                   [[f["corpus"], f["command"], f"{f['total_no_latency']:,}", f"{f['seaweedfs']['total']:,}",
                     f"{f['seaweedfs']['moto_per_partition']:,.1f}", f"{f['seaweedfs']['per_partition']:,.1f}",
                     f"{f['walls']['s3']:.1f}", f"{f['walls']['seaweedfs']:.1f}",
                     f"{f['seaweedfs']['moto_wall_per_partition_s']:.3f}",
                     f"{f['seaweedfs']['wall_per_partition_s']:.3f}"] for f in weed]),
        ]
    refused = sum(f["refused"] for f in figs)
    if refused:
        lines += ["", f"requests refused by the server (503): {refused}"]
    return "\n".join(lines)
