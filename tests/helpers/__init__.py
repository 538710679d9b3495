"""Test helpers shared by several suites."""
