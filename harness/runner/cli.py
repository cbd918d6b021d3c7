"""Run a scenario end to end: broker, acceptor (or the broker's own limits), Locust, schedule,
faults, analysis; print the verdict and the report's path.

Ctrl-C stops load, acceptor and broker cleanly and still analyses what was recorded.
With --gate the exit code is the verdict's: 0 pass, 1 fail, 2 unknown.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.runner.worker_cli import master_address


def key_value(text: str) -> tuple[str, str]:
    """`KEY=VALUE` of a repeatable option (`--set-acceptor`)."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected key=value")
    return key.strip(), value.strip()


def add_set_acceptor(parser: argparse.ArgumentParser, what: str) -> None:
    """`--set-acceptor KEY=VALUE` (repeatable; `KEY=` removes a key): one definition for
    `harness run`, `harness selftest` and the side-by-side benches."""
    parser.add_argument(
        "--set-acceptor",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"extra acceptor config (repeatable; KEY= removes one), {what}",
    )


def noise_spec(text: str) -> object:
    """`--noise cpu=N,fork=R,io=M` (harness.runner.noise), refused with key, value, reason."""
    from harness.runner.noise import NoiseError, NoiseSpec

    try:
        return NoiseSpec.parse(text)
    except NoiseError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_noise(parser: argparse.ArgumentParser) -> None:
    """`--noise`: one definition for `harness run`, `harness selftest` and `bench.noise`."""
    parser.add_argument(
        "--noise",
        type=noise_spec,
        default=None,
        metavar="cpu=N,fork=R,io=M",
        help="neighbours on purpose, in a process group of their own from before the run's "
        "clock to its end: N busy processes, R short process starts per second, M fsync-heavy "
        "writers (the mix a test suite beside the gate makes); recorded in run.json, the "
        "report and verdict.json",
    )


def add_placement(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--placement",
        choices=("auto", "off"),
        default="auto",
        help="CPU placement (default auto: with two or more CPUs, the acceptor's accepting "
        "loop on a CPU of its own and the brokers, load and runner on the others; recorded "
        "in run.json); off: every process on every CPU",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", help="a catalog name (see `harness scenarios`) or a path to a YAML file"
    )
    parser.add_argument(
        "--target",
        choices=("acceptor", "broker"),
        default=None,
        help="enforce with our acceptor or with Kafka's own limits (default: the scenario's)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("runs"), help="parent of the run folder (default runs/)"
    )
    parser.add_argument("--gate", action="store_true", help="exit 0/1/2 for pass/fail/unknown")
    parser.add_argument(
        "--web", action="store_true", help="Locust web UI (loopback) instead of headless"
    )
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", help="use an existing cluster")
    parser.add_argument(
        "--kafka-version",
        metavar="X.Y.Z",
        default=None,
        help="the Kafka release of the broker the run starts (default: the harness's own; "
        "another runs on the local launcher); the run is judged by that release's semantics "
        "(docs/kafka-versions.md); with --bootstrap-server, the release the existing cluster "
        "runs (it reports only the API versions it answers), judged as that",
    )
    parser.add_argument(
        "--zookeeper",
        action="store_true",
        help="the started broker keeps its metadata in ZooKeeper (releases before 4.0; the "
        "default before 3.3); local launcher",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        type=Path,
        default=None,
        help="with --bootstrap-server: Kafka's client properties for a secured listener "
        "(security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location...), "
        "used by the load and the admin connection, as Kafka's own tools take it",
    )
    parser.add_argument(
        "--broker-metrics-url",
        metavar="URL|N=URL",
        action="append",
        help="Kafka's Prometheus JMX exporter endpoint to scrape every second (default: the "
        "started broker's own; give it with --bootstrap-server: without it the metric checks "
        "are unknown; `harness broker` prints its own as metrics:); for a cluster, N=URL for "
        "each broker N (repeat it, or separate with commas), so each broker is judged by "
        "its own metrics",
    )
    parser.add_argument(
        "--launcher",
        choices=("auto", "local", "container"),
        default="auto",
        help="how to start the broker (default auto: container if Docker answers)",
    )
    parser.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    parser.add_argument("--duration", type=float, default=None, help="shorten the load (seconds)")
    add_set_acceptor(parser, "e.g. harness.test.skip.ip.rate.check=true")
    add_noise(parser)
    add_placement(parser)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="each engine load phase runs as a Locust master that waits for N workers "
        "(`harness worker --master HOST:PORT`, one per machine), splits its arrivals between "
        "them and takes their histories home (default: the scenario's `workers`, else none)",
    )
    parser.add_argument(
        "--worker-netns",
        action="store_true",
        help="with --workers N: make the N worker hosts here, as network namespaces with "
        "addresses from 198.18.0.0/15 on a bridge the target listens on, start a worker "
        "in each and remove them at the end (needs root)",
    )
    parser.add_argument(
        "--master-bind",
        type=master_address,
        default=("127.0.0.1", 5557),
        metavar="HOST:PORT",
        help="with --workers N on other machines: where each phase's Locust master listens "
        "for them (default 127.0.0.1:5557: this machine only)",
    )
    parser.add_argument(
        "--shared-run-dir",
        action="store_true",
        help="with --workers N: the run folder (--out) is on storage every worker machine "
        "shares at the same path; each worker writes its history there itself (default: "
        "home to the master over Locust's channel)",
    )
    parser.add_argument(
        "--no-analyze", dest="analyze", action="store_false", help="stop after the load"
    )
    parser.add_argument(
        "--spark-master", default=None, help="Spark master for the analysis (default local[*])"
    )


def run(args: argparse.Namespace) -> int:
    from harness.runner.catalog import load
    from harness.runner.orchestrator import EXIT_CODES, Orchestrator, RunOptions
    from harness.runner.scenario import MAX_WORKERS, ScenarioError

    try:
        scenario = load(args.scenario)
    except ScenarioError as exc:
        print(f"harness run: invalid scenario: {exc}")
        return 3
    target = args.target or scenario.target
    if target not in scenario.targets:
        print(
            f"harness run: --target={target!r}: scenario {scenario.name} "
            f"supports {list(scenario.targets)}"
        )
        return 3
    if args.duration is not None and args.duration <= 0:
        print(f"harness run: --duration={args.duration!r}: must be > 0")
        return 3
    if args.command_config is not None:
        problem = _command_config_problem(args.command_config, args.bootstrap_server, target)
        if problem:
            print(f"harness run: --command-config {args.command_config}: {problem}")
            return 3
    if args.workers is not None and not 0 <= args.workers <= MAX_WORKERS:
        print(f"harness run: --workers={args.workers}: between 0 and {MAX_WORKERS}")
        return 3
    workers = scenario.workers if args.workers is None else args.workers
    if args.worker_netns and not workers:
        print("harness run: --worker-netns: needs --workers N (or the scenario's workers)")
        return 3
    from harness.runner.kafka_metrics import parse_metrics_urls

    try:
        metrics_urls = parse_metrics_urls(args.broker_metrics_url)
    except ValueError as exc:
        print(f"harness run: {exc}")
        return 3
    kafka_version = None
    if args.kafka_version is not None:
        from base.quota.config import ConfigError
        from base.quota.versions import release

        try:
            kafka_version = release(args.kafka_version, key="--kafka-version")
        except ConfigError as exc:
            print(f"harness run: {exc}")
            return 3
    opts = RunOptions(
        target=target,
        command_config=args.command_config,
        kafka_version=kafka_version,
        zookeeper=True if args.zookeeper else None,
        out=args.out,
        launcher=args.launcher,
        bootstrap_server=args.bootstrap_server,
        broker_metrics_url=metrics_urls,
        seed=args.seed,
        duration=args.duration,
        set_acceptor=dict(args.set_acceptor),
        web=args.web,
        analyze=args.analyze,
        spark_master=args.spark_master,
        noise=args.noise,
        placement=args.placement,
        workers=args.workers,
        worker_netns=args.worker_netns,
        master_bind=args.master_bind,
        shared_run_dir=args.shared_run_dir,
    )
    from harness.runner.rundir import RunFolderError

    try:
        result = Orchestrator(scenario, opts).run()
    except RunFolderError as exc:
        print(f"harness run: {exc}; nothing was started (choose another --out)")
        return 3
    expected = scenario.expect_for(target).verdict
    print()
    print(f"scenario {scenario.name} on {target}: {result.wall_s:.0f}s wall, run {result.run_dir}")
    if result.interrupted:
        print("  (interrupted: the verdict covers what was recorded)")
    if result.error:
        print(f"  run error: {result.error}")
    judged = [c for c in result.checks if c.get("verdict") != "n/a"]
    na = [str(c.get("name", "?")) for c in result.checks if c.get("verdict") == "n/a"]
    for c in judged:
        mark = " [exercised]" if c.get("exercised") and c.get("verdict") == "pass" else ""
        print(f"  {str(c.get('verdict', '?')).upper():8} {c.get('name', '?')}{mark}: {_brief(c)}")
    if na:
        print(f"  n/a (not configured, not counted): {', '.join(na)}")
    nothing_judged = bool(result.error) and not result.checks and not result.interrupted
    if nothing_judged and not result.started:
        print("VERDICT: none (the target never started, so nothing ran and nothing was judged)")
    elif nothing_judged:
        print("VERDICT: none (the run broke and nothing was judged; see the run error above)")
    elif args.analyze:
        for reason in _reasons(result.run_dir):
            print(f"  why: {reason}")
        print(f"VERDICT: {result.verdict.upper()} (scenario expects {expected})")
        if result.report:
            print(f"report: {result.report}")
        else:
            print(f"report: none; run `harness analyze {result.run_dir}` to retry")
    if nothing_judged:
        return 3  # nothing was judged, so no gate verdict either
    if args.gate:
        return EXIT_CODES.get(result.verdict, 2)
    if result.error and not result.interrupted:
        return 3
    return 130 if result.interrupted else 0


def _command_config_problem(path: Path, bootstrap_server: str | None, target: str) -> str:
    """Why a ``--command-config`` cannot be used ("" when it can): it secures the connections
    to an existing cluster (a started broker makes its own), and every key must be one the
    harness honours (`base.security.clientprops`)."""
    from base.security import clientprops

    if not bootstrap_server:
        return "needs --bootstrap-server (a broker the harness starts makes its own client config)"
    if target != "broker":
        return "needs --target broker (the acceptor relays PLAINTEXT listeners only)"
    try:
        clientprops.kafka_python_config(clientprops.read(path))
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    except ValueError as exc:
        return str(exc)
    return ""


def _reasons(run_dir: Path) -> list[str]:
    import json

    path = run_dir / "report" / "verdict.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [str(r) for r in data.get("reasons") or []]


def _brief(check: dict[str, object]) -> str:
    obs, exp = check.get("observed"), check.get("expected")
    text = f"observed {obs}" if obs is not None else ""
    if exp is not None:
        text += f"; expected {exp}"
    return text[:160]
