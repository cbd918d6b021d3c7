"""ip quota entities: stored by the name given, enforced on the address it names."""

from __future__ import annotations

import pytest

from base.quota.client_quota_admin import enforced_ip_quotas, ip_entity_address
from base.quota.inet import java_get_by_name


def lookup(name: str) -> str:
    if name != "localhost":
        raise OSError(f"{name}: Name or service not known")
    return "127.0.0.1"


def resolve(host: str) -> str:
    return java_get_by_name(host, lookup)


def test_names_become_the_addresses_they_name() -> None:
    by_name = {"default": 5, "[::1]": 3, "::ffff:127.0.0.9": 2, "017.0.0.1": 4}
    assert enforced_ip_quotas(by_name, resolve) == {
        "default": 5,
        "::1": 3,
        "127.0.0.9": 2,
        "17.0.0.1": 4,
    }


def test_two_names_of_one_address_the_last_wins() -> None:
    assert enforced_ip_quotas({"localhost": 1, "127.0.0.1": 2}, resolve) == {"127.0.0.1": 2}
    assert enforced_ip_quotas({"127.0.0.1": 2, "localhost": 1}, resolve) == {"127.0.0.1": 1}


def test_a_name_that_no_longer_resolves_is_left_out() -> None:
    assert enforced_ip_quotas({"gone.example": 1, "default": 2}, resolve) == {"default": 2}


def test_the_default_entity_has_no_address() -> None:
    assert ip_entity_address(None, resolve) is None
    with pytest.raises(OSError):
        ip_entity_address("0x7f.0.0.1", resolve)
