"""Stands in for the PyPI placeholder package `nki`, which refuses to be imported (tests only)."""

raise ImportError(
    "This is a placeholder package. Install the AWS Neuron SDK from https://pip.repos.neuron.amazonaws.com"
)
