"""Coverage-guided fuzzing (atheris/libFuzzer) of the same parsers, as a bounded CI step.

Why next to Hypothesis: Hypothesis generates inputs from our idea of the structure;
atheris mutates bytes guided by which branches of base.wire, kafka-python's decoders and
the admin handler they reach, so it finds inputs nobody thought to describe. Each target
runs in a child process (libFuzzer owns the process and exits when done) for a bounded
number of runs; a crash (any exception but the documented one) fails the test with the
crashing input saved under the pytest tmp dir.

Run one target by hand for a longer soak:

    .venv/bin/python tests/fuzz/test_atheris.py admin -runs=1000000 -max_total_time=600
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

RUNS = int(os.environ.get("HARNESS_ATHERIS_RUNS", "20000"))
TARGETS = ("framing", "proxy", "admin")


@pytest.mark.parametrize("target", TARGETS)
def test_atheris_target(target: str, tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            target,
            f"-runs={RUNS}",
            "-max_total_time=60",
            f"-artifact_prefix={tmp_path}/",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", proc.stderr)
    print(f"atheris {target}: {runs[-1] if runs else '?'} inputs executed")
    assert proc.returncode == 0, proc.stderr[-4000:]


# -- the targets (run in the child) --------------------------------------------------------------
def _main() -> None:
    import atheris

    # coverage of our code only: instrumenting kafka-python and pyarrow costs a minute
    with atheris.instrument_imports(include=["harness"]):
        from acceptor.config import parse_acceptor_config
        from acceptor.connection import Connection
        from acceptor.processor import Processor
        from acceptor.recorder import ConnInfo
        from acceptor.server import Acceptor
        from base.wire.framing import FrameDecoder, FrameError, parse_request_header
        from base.wire.proxy import ProxyError, ProxyHeaderReader

    target = sys.argv[1]

    def framing(data: bytes) -> None:
        if len(data) < 1:
            return
        cut = data[0] % (len(data))
        dec = FrameDecoder(4096)
        try:
            frames = dec.feed(data[1 : cut + 1]) + dec.feed(data[cut + 1 :])
        except FrameError as exc:
            assert exc.reason in ("bad_frame", "frame_too_large")
            frames = exc.frames
        for f in frames:
            try:
                parse_request_header(f)
            except FrameError as exc:
                assert exc.reason == "bad_frame"

    def proxy(data: bytes) -> None:
        if len(data) < 1:
            return
        reader = ProxyHeaderReader(optional=bool(data[0] & 1))
        cut = data[0] >> 1
        try:
            for chunk in (data[1 : cut + 1], data[cut + 1 :]):
                if reader.feed(chunk) is not None:
                    break
        except ProxyError:
            pass

    cfg = parse_acceptor_config(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": "127.0.0.1:9",
            "metrics.port": "-1",
        }
    )

    def resolve(host: str) -> str:
        import ipaddress

        return ipaddress.ip_address(host).compressed

    def admin(data: bytes) -> None:
        if len(data) < 2:
            return
        api_key = (44, 48, 49)[data[0] % 3]
        version = data[1] % 2
        payload = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\0\0\0\7\0\0"
        payload += data[2:]
        frame = len(payload).to_bytes(4, "big") + payload
        acceptor = Acceptor(cfg)
        acceptor.admin.resolve = resolve
        proc = Processor(acceptor.conns, "CLIENT", 0, False)
        info = ConnInfo("CLIENT-atheris", "CLIENT", "127.0.0.1", 1, "127.0.0.1", 1)
        conn = Connection(
            acceptor.conns, proc, info, b"", False, charges=None, clock=time.monotonic_ns
        )
        try:
            acceptor.admin.maybe_handle(conn, frame, parse_request_header(frame))
        except FrameError as exc:
            # admin_error = an unexpected exception the handler's safety net caught: a bug
            assert exc.reason == "bad_frame", (exc.reason, str(exc))
        # a handler failure answered UNKNOWN_SERVER_ERROR (as Kafka does): a bug too
        assert not acceptor.admin.failures, acceptor.admin.failures

    fn = {"framing": framing, "proxy": proxy, "admin": admin}[target]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], fn)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    _main()
