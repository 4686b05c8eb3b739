"""`make bench`: clusterctl against Ansible, pdsh, OpenSSH and scp on rehearsal clusters.

    python bench/run.py                  # everything (~15 min on 2 cores), then the sandbox goes down
    python bench/run.py --quick          # fewer sizes and rounds, for trying changes
    python bench/run.py --only fanout,help
    python bench/run.py --report         # re-render docs/benchmarks.md and the plot from bench/results.json

Needs root on Linux (the sandbox: network namespaces, sshd, Docker Engines), pdsh and
OpenSSH; installs ansible-core and matplotlib into bench/.venv. Results go to
bench/results.json, docs/benchmarks.md and docs/benchmarks.png; verdicts against the
goals are printed at the end.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import WORK, fresh_dir, log  # noqa: E402

SECTIONS = ("help", "fanout", "playbook", "up", "launch", "launch_vs_hand", "cpu_account", "collect", "heal", "heal_gib", "distribute", "scale")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 4 and 16, 3 rounds: a smoke run")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--sizes", default=None, help="fan-out node counts (default 4,16,32)")
    parser.add_argument("--playbook-sizes", default=None, help="playbook node counts (default 16)")
    parser.add_argument("--docker-nodes", type=int, default=16, help="nodes for `up` warm (default 16)")
    parser.add_argument("--reps", type=int, default=None, help="rounds for the fast measurements (default 5)")
    parser.add_argument("--take-over", action="store_true",
                        help="use (and finally remove) a sandbox that is already up instead of refusing")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up at the end")
    parser.add_argument("--report", action="store_true", help="only re-render the report from bench/results.json")
    parser.add_argument("--before", type=Path, default=None,
                        help="a directory holding clusterctl/ from before the fixes (and its extra dependencies in "
                             "DIR/deps): measured alongside")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.only if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    if args.sizes is None:
        args.sizes = "4,16" if args.quick else "4,16,32"
    if args.playbook_sizes is None:
        args.playbook_sizes = "16"
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.playbook_sizes = [int(s) for s in args.playbook_sizes.split(",")]
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.before:
        import os

        os.environ["BENCH_BEFORE"] = str(args.before.resolve())
        common.BEFORE = args.before.resolve()
    import report

    if args.report:
        return report.publish(common.load())
    bin_dir = common.ensure_bench_venv()
    common.compile_sources()  # as after `pip install`: no process pays for compiling clusterctl's modules
    from clusterctl.sandbox import down, status, up

    if status()["up"] and not args.take_over:
        log("a rehearsal cluster is already up (someone may be using it): refusing to reshape it. "
            "Take it down first (clusterctl sandbox down) or pass --take-over.")
        return 2
    results = common.load() if args.only != list(SECTIONS) else {}
    results["machine"] = common.machine()
    results["config"] = {"reps": args.reps, "quick": args.quick, "sizes": args.sizes,
                         "playbook_sizes": args.playbook_sizes, "docker_nodes": args.docker_nodes}
    phases = results.setdefault("phases", {})
    fresh_dir(WORK)
    started = time.monotonic()

    def phase(name: str, fn):
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            phases[name] = round(time.monotonic() - t0, 1)
            common.save(results)

    try:
        if "help" in args.only:
            import fanout

            results["help"] = phase("help", lambda: fanout.measure_help(max(args.reps, 10)))
        if "fanout" in args.only or "playbook" in args.only:
            _without_docker(args, results, phase, up, bin_dir)
        if {"up", "launch", "collect", "heal", "heal_gib"} & set(args.only):
            _with_docker(args, results, phase, up, down)
        if "launch_vs_hand" in args.only:  # `clusterctl run` beside torchrun typed by hand, 2 and 8 nodes (issue 40)
            import launch_vs_hand

            for n in (2,) if args.quick else (2, 8):
                results.setdefault("launch_vs_hand", {}).setdefault("after", {})[str(n)] = phase(
                    f"launch_vs_hand {n}", lambda: dict(launch_vs_hand.measure_at(n, 3), measured=time.strftime("%Y-%m-%d %H:%M")))
        if "cpu_account" in args.only:  # every CPU second of a run, by process kind: local, 2, 8, 16 nodes (issue 52)
            import cpu_account

            for label, measure in [("local", cpu_account.local)] + [
                    (str(n), lambda n=n: cpu_account.rehearsal(n)) for n in ((2,) if args.quick else (2, 8, 16))]:
                results.setdefault("cpu_account", {})[label] = phase(
                    f"cpu_account {label}", lambda: dict(measure(), measured=time.strftime("%Y-%m-%d %H:%M")))
        if "distribute" in args.only:  # its own Docker sandboxes, 4 to 32 nodes (issue 22)
            import distribute

            for n in (4, 16) if args.quick else (4, 8, 16, 32):
                results.setdefault("distribute", {})[str(n)] = phase(f"distribute {n}", lambda: dict(
                    distribute.measure(n, 200, "200mbit", 1, 20, registry=n < 32), measured=time.strftime("%Y-%m-%d %H:%M")))
        if "scale" in args.only:  # its own SSH-only sandboxes, 64 to 240 nodes (issue 21)
            import scale

            for n in (64,) if args.quick else (64, 128, 240):
                results.setdefault("scale", {})[str(n)] = phase(f"scale {n}", lambda: dict(
                    scale.measure(n, 1 if args.quick else 3), measured=time.strftime("%Y-%m-%d %H:%M")))
            for n in () if args.quick else (4, 16, 64):  # the journey at many Docker nodes (~10 min on 2 cores)
                results.setdefault("scale_docker", {})[str(n)] = phase(f"scale docker {n}", lambda: dict(
                    scale.measure_docker(n), measured=time.strftime("%Y-%m-%d %H:%M")))
    finally:
        if not args.keep:
            log("bringing the sandbox down")
            phase("sandbox down", down)
        phases["total"] = round(time.monotonic() - started, 1)
        common.save(results)
    return report.publish(results)


def _without_docker(args, results, phase, up, bin_dir) -> None:
    import fanout
    import playbook

    sizes = sorted(set(args.sizes if "fanout" in args.only else []) | set(
        args.playbook_sizes if "playbook" in args.only else []))
    for n in sizes:
        log(f"sandbox: {n} nodes, no docker")
        sandbox = phase(f"sandbox up {n}", lambda: up(n, docker=False))
        if "fanout" in args.only and n in args.sizes:
            results.setdefault("fanout", {})[str(n)] = phase(f"fanout {n}", lambda: fanout.measure(sandbox, bin_dir, args.reps))
        if "playbook" in args.only and n in args.playbook_sizes:
            results.setdefault("playbook", {})[str(n)] = phase(
                f"playbook {n}", lambda: playbook.measure(sandbox, bin_dir, max(5, args.reps), 2 if args.quick else 3,
                                                          forks_n=not args.quick))


def _with_docker(args, results, phase, up, down) -> None:
    import collect
    import launch
    import up as up_bench

    if "up" in args.only:
        n = args.docker_nodes
        log(f"sandbox: {n} nodes with Docker Engines")
        sandbox = phase(f"sandbox up {n} --docker", lambda: up(n, docker=True))
        results["up_warm"] = phase(f"up warm {n}", lambda: up_bench.measure_warm(sandbox, max(5, args.reps)))
    log("sandbox: 4 nodes with Docker Engines")
    sandbox = phase("sandbox up 4 --docker", lambda: up(4, docker=True))
    state = fresh_dir(WORK / "docker-state")
    if "up" in args.only:
        results["up_cold"] = phase("up cold 4", lambda: up_bench.measure_cold(sandbox, 3 if args.quick else 5))
    else:
        phase("up 4", lambda: common.timed(up_bench.up_argv(sandbox), env=common.clusterctl_env(state)))
    run_id = None
    if "launch" in args.only or "collect" in args.only:
        reps = 3 if "launch" in args.only else 1
        results["launch"] = launch_result = phase("launch", lambda: launch.measure(sandbox, state, reps))
        run_id = launch_result["last_run_id"]
    if "collect" in args.only:
        if run_id is None:
            log("collect: no successful run to collect; skipped")
        else:
            results["collect"] = phase("collect", lambda: collect.measure(sandbox, state, run_id, max(5, args.reps)))
    if {"heal", "heal_gib"} & set(args.only):
        import heal
    if "heal" in args.only:  # a node cut mid-run, relaunched on a spare (issue 35)
        results["heal"] = phase("heal", lambda: heal.measure(sandbox, state))
        results["heal_replicas"] = phase("heal replicas", lambda: heal.measure_replicas(sandbox, state))
    if "heal_gib" in args.only:  # issue 50's goals: a 1 GiB checkpoint per node; what the copies cost a step
        results["heal_gib"] = phase("heal 1 GiB", lambda: heal.measure_gib(sandbox, state))
        results["replica_cost"] = phase("replica cost", lambda: heal.measure_replica_cost(sandbox, state))
    if "launch" in args.only and not args.quick:  # the 8 nodes, on a sandbox of their own
        phase("sandbox down (4)", down)
        results.setdefault("launch_by_nodes", {})["8"] = phase("launch 8", lambda: dict(
            launch.measure_at(8, 3), measured=time.strftime("%Y-%m-%d %H:%M")))


if __name__ == "__main__":
    sys.exit(main())
