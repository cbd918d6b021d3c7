"""Client quotas on user/client-id: precedence, bucket sharing, exemptions, throttle forms."""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():  # kafka.protocol loads its schemas with deprecated APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_key import ApiKey

from base.quota import DEFAULT, RequestQuotas, combine
from base.quota.requests import (
    CLUSTER_ACTION_API_KEYS,
    EXEMPT_API_KEYS,
    NOT_SERVED_CLUSTER_ACTION_API_KEYS,
    THROTTLED_CLUSTER_ACTION_API_KEYS,
    UNLIMITED,
)

N = 11  # quota.window.num


class TestPrecedence:
    """Kafka's ClientQuotaManagerTest.testQuotaConfigPrecedence, step by step.

    Every record happens at one instant, so the window is the padded 10 s: a value of
    ``v * 11`` bytes against bound ``b`` violates iff the bucket's sum / 10 > b.
    """

    def check(
        self, q: RequestQuotas, user: str, client: str, bound: float, value: int, throttle: bool
    ) -> None:
        assert q.quota_for(user, client, "producer_byte_rate") == bound, (user, client)
        assert q.max_value_in_quota_window(user, client, "producer_byte_rate") == (N - 1) * bound
        t = q.record_bytes("produce", user, client, value * N, 0)
        assert (t > 0) == throttle, (user, client, value, t)

    def test_quota_config_precedence(self) -> None:
        q = RequestQuotas()
        k = "producer_byte_rate"
        q.set_quota(DEFAULT, None, k, 1000)
        q.set_quota(None, DEFAULT, k, 2000)
        q.set_quota(DEFAULT, DEFAULT, k, 3000)
        q.set_quota("userA", None, k, 4000)
        q.set_quota("userA", "client1", k, 5000)
        q.set_quota("userB", None, k, 6000)
        q.set_quota("userB", "client1", k, 7000)
        q.set_quota("userB", DEFAULT, k, 8000)
        q.set_quota("userC", None, k, 10000)
        q.set_quota(None, "client1", k, 9000)

        self.check(q, "userA", "client1", 5000, 4500, False)  # <user, client> over <user>
        self.check(q, "userA", "client2", 4000, 4500, True)  # <user> over <client>, defaults
        self.check(q, "userA", "client3", 4000, 0, True)  # <user> shared across its clients
        self.check(q, "userA", "client1", 5000, 0, False)  # <user, client> is exclusive
        self.check(q, "userB", "client1", 7000, 8000, True)
        self.check(q, "userB", "client2", 8000, 7000, False)  # <user, default>: per client
        self.check(q, "userB", "client3", 8000, 7000, False)
        self.check(q, "userD", "client1", 3000, 3500, True)  # <default, default>
        self.check(q, "userD", "client2", 3000, 2500, False)
        self.check(q, "userE", "client1", 3000, 2500, False)

        q.set_quota(DEFAULT, DEFAULT, k, None)  # back to the <default> user quota
        self.check(q, "userD", "client1", 1000, 0, False)  # new bucket: counter restarts
        self.check(q, "userE", "client4", 1000, 1500, True)
        self.check(q, "userF", "client4", 1000, 800, False)  # <default-user>: per user,
        self.check(q, "userF", "client5", 1000, 800, True)  # shared by its clients

        q.set_quota(DEFAULT, None, k, None)  # back to the <default> client-id quota
        self.check(q, "userF", "client4", 2000, 0, False)
        self.check(q, "userF", "client5", 2000, 0, False)
        self.check(q, "userF", "client5", 2000, 2500, True)
        self.check(q, "userG", "client5", 2000, 0, True)  # <default-client> shared by users

        q.set_quota("userA", None, k, 8000)
        q.set_quota("userA", "client1", k, 10000)
        self.check(q, "userA", "client2", 8000, 0, False)
        self.check(q, "userA", "client2", 8000, 4500, True)  # earlier values still count
        self.check(q, "userA", "client1", 10000, 0, False)
        self.check(q, "userA", "client1", 10000, 6000, True)
        q.set_quota("userA", "client1", k, None)
        self.check(q, "userA", "client6", 8000, 0, True)  # shared user bucket
        q.set_quota("userA", "client6", k, 11000)
        self.check(q, "userA", "client6", 11000, 8500, False)
        q.set_quota("userA", DEFAULT, k, 12000)
        q.set_quota("userA", "client6", k, None)
        self.check(q, "userA", "client6", 12000, 4000, True)

    def test_buckets(self) -> None:
        q = RequestQuotas()
        k = "request_percentage"
        q.set_quota("u", None, k, 50)
        q.set_quota(None, "c", k, 50)  # two levels enabled: the precedence walk runs
        assert q.bucket_for("u", "c1") == q.bucket_for("u", "c2") == ("u", "")
        assert q.bucket_for("x", "c") == q.bucket_for("y", "c") == ("", "c")
        q.set_quota("u", DEFAULT, k, 50)
        assert q.bucket_for("u", "c1") == ("u", "c1") != q.bucket_for("u", "c2")
        q.set_quota(DEFAULT, None, k, 50)
        assert q.bucket_for("x", "c") == ("x", "")
        assert q.bucket_for("y", "other") == ("y", "")

    def test_single_level_rule(self) -> None:
        only_client = RequestQuotas()
        only_client.set_quota(None, "c", "request_percentage", 10)
        assert only_client.bucket_for("u1", "c") == only_client.bucket_for("u2", "c") == ("", "c")
        assert only_client.quota_for("u1", "c") == 10
        assert only_client.quota_for("u1", "d") == UNLIMITED

        only_user = RequestQuotas()
        only_user.set_quota("u", None, "request_percentage", 10)
        assert only_user.bucket_for("u", "c") == ("u", "")
        assert only_user.bucket_for("v", "c") == ("v", "")  # fixed key, even without a quota
        assert only_user.quota_for("v", "c") == UNLIMITED

        only_pair = RequestQuotas()
        only_pair.set_quota("u", "c", "request_percentage", 10)
        assert only_pair.bucket_for("v", "d") == ("v", "d")

    def test_enabled_levels_are_never_forgotten(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "request_percentage", 10)
        q.set_quota("u", None, "request_percentage", None)
        assert q.bucket_for("w", "c") == ("w", "")  # still the user-only key
        assert q.record_request("w", "c", 3, 10**9, 0).bucket == ("w", "")

    def test_describe_lists_entities(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", DEFAULT, "request_percentage", 25)
        q.set_quota("u", DEFAULT, "producer_byte_rate", 1024)
        q.set_quota(None, "c", "consumer_byte_rate", 2048)
        got = {tuple(sorted(e.entity.items(), key=str)): e.values for e in q.quotas()}
        assert got == {
            (("client-id", None), ("user", "u")): {
                "request_percentage": 25.0,
                "producer_byte_rate": 1024.0,
            },
            (("client-id", "c"),): {"consumer_byte_rate": 2048.0},
        }

    @pytest.mark.parametrize(
        ("user", "client", "key", "value", "message"),
        [
            (None, None, "request_percentage", 1.0, "empty"),
            ("", None, "request_percentage", 1.0, "Empty user"),
            ("u", None, "connection_creation_rate", 1.0, "Invalid configuration key"),
            ("u", None, "request_percentage", 0.0, "greater than 0"),
        ],
    )
    def test_bad_quotas_are_refused(
        self, user: str | None, client: str | None, key: str, value: float, message: str
    ) -> None:
        with pytest.raises(ValueError, match=message):
            RequestQuotas().set_quota(user, client, key, value)


class TestRequestTime:
    def test_no_quota_records_nothing(self) -> None:
        q = RequestQuotas()
        charge = q.record_request("u", "c", 3, 10**10, 0)
        assert (charge.throttle_ms, charge.exempt, charge.quota) == (0, False, UNLIMITED)
        assert q.rate("u", "c", 0) == 0.0

    def test_percentage_of_a_thread_and_bounded_throttle(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "request_percentage", 1.0)  # 1% of one thread = 10 ms/s
        # Burst: 1% x 10 s = 10 %s = 100 ms of handler time at one instant.
        first = q.record_request("u", "c", 3, 100_000_000, 0)
        assert first.throttle_ms == 0
        assert first.rate == pytest.approx(1.0)
        assert first.bucket == ("u", "")
        second = q.record_request("u", "c", 3, 5_000_000, 0)  # +0.5 %s -> 1.05%
        assert second.throttle_ms == 500  # 0.05/1 * 10 000
        heavy = q.record_request("u", "c2", 3, 10**9, 0)  # same <user> bucket
        assert heavy.throttle_ms == 1_000  # capped at the window

    def test_network_thread_time_counts_toward_the_next_check(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "request_percentage", 1.0)
        assert q.record_request("u", "c", 3, 90_000_000, 0).throttle_ms == 0
        q.record_no_throttle("u", "c", 20_000_000, 0)  # never throttles by itself
        assert q.rate("u", "c", 0) == pytest.approx(1.1)
        assert q.record_request("u", "c", 3, 1, 0).throttle_ms > 0

    def test_exempt_apis_are_never_throttled(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "request_percentage", 0.001)
        for api in sorted(EXEMPT_API_KEYS):
            charge = q.record_request("u", "c", api, 10**10, 0)
            assert (charge.throttle_ms, charge.exempt) == (0, True), api
        assert q.rate("u", "c", 0) == 0.0
        before = q.exempt_rate(0)
        assert before > 0
        q.record_no_throttle("u", "c", 10**9, 0, exempt=True)  # network time of an exempt one
        assert q.exempt_rate(0) == pytest.approx(before + 10.0)  # 100 %s over 10 s
        assert q.rate("u", "c", 0) == 0.0
        acks0 = q.record_request("u", "c", 0, 10**10, 0, acks_zero_produce=True)
        assert (acks0.throttle_ms, acks0.exempt) == (0, True)
        follower = q.record_request("u", "c", 1, 10**10, 0, follower_fetch=True)
        assert follower.exempt

    def test_unauthorized_cluster_action_and_update_features_are_throttled(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "request_percentage", 0.001)
        denied = q.record_request("u", "c", 27, 10**10, 0, cluster_action_unauthorized=True)
        assert not denied.exempt and denied.throttle_ms == 1_000
        features = q.record_request("u", "c", int(ApiKey.UpdateFeatures), 10**10, 0)
        assert not features.exempt and features.throttle_ms == 1_000

    def test_exempt_set_is_kafka_4_3_1_brokers(self) -> None:
        # KafkaApis: only WriteTxnMarkers answers through sendResponseExemptThrottle; the
        # forwarded DescribeQuorum/UpdateFeatures and the share-group-state APIs go through
        # sendMaybeThrottle; the ZooKeeper-era and controller-only ones are not served.
        assert EXEMPT_API_KEYS == {int(ApiKey.WriteTxnMarkers)}
        throttled = {
            "DescribeQuorum", "UpdateFeatures", "InitializeShareGroupState",
            "ReadShareGroupState", "WriteShareGroupState", "DeleteShareGroupState",
            "ReadShareGroupStateSummary",
        }  # fmt: skip
        assert {int(ApiKey[n]) for n in throttled} == THROTTLED_CLUSTER_ACTION_API_KEYS
        not_served = {
            "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown",
            "AlterPartition", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "Envelope",
            "BrokerRegistration", "BrokerHeartbeat", "AllocateProducerIds",
        }  # fmt: skip
        assert {int(ApiKey[n]) for n in not_served} == NOT_SERVED_CLUSTER_ACTION_API_KEYS
        parts = (
            EXEMPT_API_KEYS,
            THROTTLED_CLUSTER_ACTION_API_KEYS,
            NOT_SERVED_CLUSTER_ACTION_API_KEYS,
        )
        assert sum(len(p) for p in parts) == len(CLUSTER_ACTION_API_KEYS)
        assert frozenset().union(*parts) == CLUSTER_ACTION_API_KEYS

    def test_describe_quorum_and_share_group_state_are_throttled(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "request_percentage", 0.001)
        for api in (55, 83, 84, 85, 86, 87):
            charge = q.record_request("u", "c", api, 10**10, 0)
            assert not charge.exempt and charge.throttle_ms > 0, api
        assert q.exempt_rate(0) == 0.0

    def test_cluster_action_numbers_match_kafka_python(self) -> None:
        names = {
            "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown",
            "WriteTxnMarkers", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum",
            "AlterPartition", "UpdateFeatures", "Envelope", "BrokerRegistration",
            "BrokerHeartbeat", "AllocateProducerIds", "InitializeShareGroupState",
            "ReadShareGroupState", "WriteShareGroupState", "DeleteShareGroupState",
            "ReadShareGroupStateSummary",
        }  # fmt: skip
        assert {int(ApiKey[n]) for n in names} == CLUSTER_ACTION_API_KEYS


class TestBytesAndRequestTogether:
    def test_byte_rate_throttle_is_unbounded(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "producer_byte_rate", 500)
        t = 0
        for _ in range(10):
            assert q.record_bytes("produce", "u", "c", 400, t) == 0
            t += 1000
        assert q.record_bytes("produce", "u", "c", 2300, t + 500) == 2100  # > the window

    def test_larger_throttle_wins_and_a_tie_goes_to_the_request_manager(self) -> None:
        q = RequestQuotas()
        q.set_quota("u", None, "producer_byte_rate", 500)
        q.set_quota("u", None, "request_percentage", 0.001)
        for i in range(10):
            q.record_bytes("produce", "u", "c", 400, i * 1000)
        t_bytes = q.record_bytes("produce", "u", "c", 2300, 10_500)
        t_req = q.record_request("u", "c", 0, 10**9, 10_500).throttle_ms
        assert (t_bytes, t_req) == (2100, 1000)
        assert combine(t_bytes, t_req) == (2100, "bytes")
        assert combine(300, 1000) == (1000, "request")
        assert combine(700, 700) == (700, "request")
        assert combine(0, 0) == (0, None)

    def test_unrecorded_fetch_bytes(self) -> None:
        q = RequestQuotas()
        q.set_quota(None, DEFAULT, "consumer_byte_rate", 100)
        assert q.record_bytes("fetch", "u", "c", 1000, 0) == 0
        throttle = q.record_bytes("fetch", "u", "c", 500, 0)
        assert throttle > 0
        q.unrecord_bytes("fetch", "u", "c", 500, 0)  # throttled fetch: empty response
        assert q.rate("u", "c", 0, "consumer_byte_rate") == pytest.approx(100.0)
