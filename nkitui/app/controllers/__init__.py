"""Mixins of NkituiApp, one per domain it drives (review, runs)."""
