"""Compatibility alias: this module moved to nkitui.evaluate.run.store (import from there)."""

import sys

from nkitui.evaluate.run.store import __name__ as _moved_to

sys.modules[__name__] = sys.modules[_moved_to]
