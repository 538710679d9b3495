"""Peer projects' own test suites run unchanged against the emulator (see common.py for the runner
interface and docs/emulator.md for how to run it and the latest counts)."""
