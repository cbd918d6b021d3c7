"""The scenario catalog: one YAML file per scenario (see docs/scenarios.md).

A package only so the YAML files ship as package data with the harness.
"""
