"""Chaos/load harness for Kafka connection limits (KIP-402, KIP-612, KIP-124)."""

__version__ = "0.1.0"
