"""`harness selftest`: prove the gate catches enforcement bugs (seeded faults).

``plan`` maps every fault (``base.quota.faults``) to the scenarios covering its rule;
``run`` drives each as a real ``harness run --gate`` against the faulty acceptor, then the
same scenarios without faults, and writes the kill table.
"""
