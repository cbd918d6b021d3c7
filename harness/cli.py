"""The `harness` command: one entry point, one module per subcommand.

Subcommand modules are imported lazily so that `harness broker` does not pay for
PySpark and `harness analyze` does not pay for gevent. Each module exposes
``configure(parser)`` (add its arguments; must not import heavy dependencies at
module import time) and ``run(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("broker.cli", "start a real single-node Kafka broker (KRaft)"),
    "acceptor": ("acceptor.cli", "run the quota-enforcing acceptor in front of a broker"),
    "quotas": ("base.admin.cli", "describe/alter client quotas (kafka-configs' flags)"),
    "run": ("harness.runner.cli", "run a scenario end to end and print its verdict"),
    "worker": ("harness.runner.worker_cli", "one worker machine of `harness run --workers N`"),
    "scenarios": ("harness.runner.catalog_cli", "list the scenario catalog"),
    "analyze": ("analysis.cli", "check a run's history against the quota model"),
    "compare": ("analysis.compare_cli", "compare two runs of one scenario side by side"),
    "selftest": ("harness.selftest.cli", "prove the gate catches seeded acceptor faults"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Prove that Kafka connection limits hold: storms, history, verdict.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # a part not built yet must not break the others
            if exc.name and module_name.startswith(exc.name):
                continue
            raise
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.configure(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
