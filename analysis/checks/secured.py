"""Secured listeners behind the acceptor: quotas before TLS, and whose requests were charged.

`quota_precedes_tls`: Kafka applies every connection quota on its acceptor thread, before
its processor reads any TLS byte (`SocketServer.Acceptor.accept` -> `ConnectionQuotas.inc`,
then `Processor.configureNewConnections`; `../shared/reference/kafka-security-listeners.md`):
a connection the quotas close (a per-IP count reject, an IP-throttle close) never completes
a handshake. Judged on the client's rows: every such connection whose client started TLS
must not have finished it. Where the acceptor passes TLS through, the broker would finish
it only if the acceptor forwarded the connection; where it terminates TLS, only if it
handshook before deciding.

`principal_agreement`: requests are charged to the principal (KIP-124's user). The client
knows who it is (the SASL user it logged in as, or Kafka's name for the certificate it
offered, `base.security.client`); the acceptor's `request` rows say whom it charged. A
connection matched to its client attempt must name the same principal on both sides: the
checker never takes the enforcer's word for who a client is (a certificate subject left in
its written order, say, charges a user no quota names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.checks.base import (
    FAIL,
    MAX_WITNESSES,
    NA,
    PASS,
    Check,
    CheckResult,
    Part,
    nothing_judged,
    witness,
)
from analysis.columns import detail_col
from analysis.frames import acceptor_conns, attempt_join, client_conns, match_attempts

if TYPE_CHECKING:
    from analysis.load import Run


def _nothing(name: str, run: Run, what: str, expected: str, hint: str) -> CheckResult:
    """Nothing to judge: `unknown` when the scenario lists the check, else `n/a`."""
    res = nothing_judged(name, what, expected)
    if name not in (run.expect.get("checks") or []):
        res.verdict = NA
    res.raise_hint = hint
    return res


def check_quota_precedes_tls(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "quota_precedes_tls"
    expected = "no connection closed by a quota (reject, IP-throttle close) finishes TLS"
    if not run.meta.get("listener_security") or not run.has_source("client"):
        return CheckResult(
            name, NA, observed="no secured listener in this run", expected=expected,
            explanation="n/a: the rule is about TLS listeners",
        )  # fmt: skip
    if run.lacks("tls_start", source="client"):  # no client started TLS (the tally)
        return _nothing(
            name, run, "quota-closed connections that started TLS", expected,
            "a per-IP quota or count the TLS clients exceed",
        )  # fmt: skip
    j = attempt_join(run).where(
        F.col("a.outcome").isin("reject", "throttle_close") & F.col("c.tls_start_ns").isNotNull()
    )
    rows = j.select(
        "a.conn_id", "a.listener", "a.client_ip", "a.client_port", "a.outcome", "a.accept_ns",
        "c.tls_start_ns", "c.tls_done_ns",
    ).collect()  # fmt: skip
    if not rows:
        return _nothing(
            name, run, "quota-closed connections that started TLS", expected,
            "a per-IP quota or count the TLS clients exceed",
        )  # fmt: skip
    bad = [r for r in rows if r["tls_done_ns"] is not None]
    wit = [
        witness(
            r.asDict(),
            f"{r['outcome']} by the acceptor, yet the client finished its TLS handshake "
            f"{(r['tls_done_ns'] - r['accept_ns']) / 1e6:.1f} ms after the accept",
        )
        for r in bad[:MAX_WITNESSES]
    ]
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=f"{len(rows)} quota-closed connections started TLS; {len(bad)} finished it",
        expected=expected,
        tolerance="none (a handshake finished or not)",
        witnesses=wit,
        explanation="Kafka's connection quotas run on its acceptor thread before any TLS byte "
        "is read",
        judged=len(rows),
        exercised=True,
        parts=[Part("quota-closed TLS attempts", len(rows))],
    )


def check_principal_agreement(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "principal_agreement"
    expected = "the acceptor charges each request to the principal its client logged in as"
    if not run.has_source("client"):
        return nothing_judged(name, "client rows", expected)
    nothing = _nothing(
        name, run, "acceptor-charged connections whose client named its principal",
        expected, "clients that log in (SASL) or offer a certificate on a listener whose "
        "requests the acceptor reads",
    )  # fmt: skip
    # no acceptor request charged to a principal at all (the run's tally), or no client
    # row naming one in its detail (the client files' text, read with Arrow): nothing to
    # judge, before any DataFrame is planned (a plaintext run's acceptor charges ANONYMOUS,
    # while only the steady and the secured clients name whom they are)
    if run.lacks("request", source="acceptor", principal=True) or run.lacks_detail(
        "principal", source="client"
    ):
        return nothing
    source = F.coalesce(detail_col("acceptor", "request", "charge_source"), F.lit(""))
    req = run.events("request", source="acceptor").where(
        F.col("principal").isNotNull() & (source != F.lit("login"))
    )
    charged = req.groupBy("conn_id").agg(
        F.collect_set("principal").alias("charged"), F.count(F.lit(1)).alias("requests")
    )
    conns = acceptor_conns(run).join(charged, "conn_id")
    # who a client logged in as is on its `closed` and `request_ok` rows (`client_conns`'
    # c_principal): with none named, or no request charged to one, the join below finds
    # nothing; one pass over those rows says so (most runs: plaintext clients)
    named = run.events("closed", "request_ok", source="client").where(
        F.when(F.col("event") == "closed", detail_col("client", "closed", "principal"))
        .otherwise(detail_col("client", "request_ok", "principal"))
        .isNotNull()
    )
    if named.isEmpty() or req.isEmpty():
        return nothing
    j = match_attempts(conns, client_conns(run), run).where(F.col("c.c_principal").isNotNull())
    rows = j.select(
        "a.conn_id", "a.listener", "a.client_ip", "a.client_port", "a.accept_ns", "a.charged",
        "a.requests", "c.c_principal",
    ).collect()  # fmt: skip
    if not rows:
        return nothing
    bad = [r for r in rows if set(r["charged"]) != {r["c_principal"]}]
    wit = [
        witness(
            r.asDict(),
            f"client is {r['c_principal']!r}; its requests were charged to {sorted(r['charged'])}",
        )
        for r in bad[:MAX_WITNESSES]
    ]
    principals = sorted({str(r["c_principal"]) for r in rows})
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=(
            f"{len(rows)} connections ({sum(int(r['requests']) for r in rows)} requests) of "
            f"{len(principals)} principal(s) {principals[:4]}; {len(bad)} charged to another"
        ),
        expected=expected,
        tolerance="none (names compared exactly)",
        witnesses=wit,
        explanation="the client's own record of its login or certificate against the "
        "principal on the acceptor's request rows (SASL login requests excluded: uncharged)",
        judged=len(rows),
        exercised=True,
    )


CHECKS = [
    Check(
        "quota_precedes_tls",
        "secured",
        check_quota_precedes_tls,
        False,
        ("acceptor",),
        doc="a connection the acceptor's quotas close never completes a TLS handshake",
    ),
    Check(
        "principal_agreement",
        "secured",
        check_principal_agreement,
        False,
        ("acceptor",),
        doc="requests are charged to the principal the client logged in as (SASL) or its "
        "certificate names (mutual TLS, RFC 2253 order)",
    ),
]
