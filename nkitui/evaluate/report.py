"""Compatibility alias: this module moved to nkitui.evaluate.present.report (import from there)."""

import sys

from nkitui.evaluate.present.report import __name__ as _moved_to

sys.modules[__name__] = sys.modules[_moved_to]
