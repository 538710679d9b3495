"""Compatibility alias: this module moved to nkitui.evaluate.run.result (import from there)."""

import sys

from nkitui.evaluate.run.result import __name__ as _moved_to

sys.modules[__name__] = sys.modules[_moved_to]
