"""Trip counts that divide a size by a tile size, and how they round.

`(n + 127) // 128`, `-(-n // 128)`, `(n - 1) // 128 + 1`, `math.ceil(n / 128)` and `cdiv(n, 128)` round up (the
last tile is partial and needs a guard); `n // 128` rounds down (a remainder is dropped unless the sizes
divide); `(n + 100) // 128` rounds with a constant that is not tile-1 (suspect). The partial-tile rules read
these facts from each `Loop`.
"""

from __future__ import annotations

import ast

from nkitui.analysis.nki.expressions import ExpressionEvaluator
from nkitui.analysis.nki.module import ModuleFacts
from nkitui.analysis.nki.scope import Division
from nkitui.analysis.nki.values import Api, FuncRef, Value, known_int

_CEIL_HELPERS = frozenset({"cdiv", "ceil_div", "div_ceil", "ceildiv", "div_round_up", "ceil_divide", "round_up_div"})


class TileDivisions:
    """Recognises tile divisions in expressions (re-reading them quietly: nothing is recorded)."""

    def __init__(self, module: ModuleFacts, exprs: ExpressionEvaluator):
        self.source = module.source
        self.exprs = exprs

    def of(self, node: ast.expr) -> Division | None:
        """How `node` divides a size by a tile: ceil (X+P-1)//P, floor X//P, ...; None if it does not."""
        seg = self.source.text
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            den = known_int(self.exprs.quiet_eval(node.right))
            left = node.left
            if isinstance(left, ast.UnaryOp) and isinstance(left.op, ast.USub):
                return None
            # (X + P - 1) // P, (X + 127) // 128, (P - 1 + X) // P ...: split the additive terms of the
            # numerator into the size X and a rounding constant (literals and the divisor itself).
            den_dump = ast.dump(node.right)
            const = 0
            size_terms: list[tuple[int, ast.expr]] = []
            for sign, term in _additive_terms(left):
                if isinstance(term, ast.Constant) and isinstance(term.value, int):
                    const += sign * term.value
                elif ast.dump(term) == den_dump and den is not None:
                    const += sign * den
                else:
                    size_terms.append((sign, term))
            if const > 0 and den is not None and size_terms:
                numerator: Value = 0
                for sign, term in size_terms:
                    numerator = self.exprs.binop(ast.Add if sign > 0 else ast.Sub, numerator,
                                                 self.exprs.quiet_eval(term), term)
                text = " + ".join(("-" if sign < 0 else "") + seg(term) for sign, term in size_terms)
                kind = "ceil" if const == den - 1 else "ceil-suspect"
                return kind, numerator, text, den
            return "floor", self.exprs.quiet_eval(left), seg(left), den
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = node.operand
            if (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.FloorDiv)
                    and isinstance(inner.left, ast.UnaryOp) and isinstance(inner.left.op, ast.USub)):
                return "ceil", self.exprs.quiet_eval(inner.left.operand), seg(inner.left.operand), \
                    known_int(self.exprs.quiet_eval(inner.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            # (X - 1) // P + 1
            left = node.left
            if (known_int(self.exprs.quiet_eval(node.right)) == 1 and isinstance(left, ast.BinOp)
                    and isinstance(left.op, ast.FloorDiv) and isinstance(left.left, ast.BinOp)
                    and isinstance(left.left.op, ast.Sub) and known_int(self.exprs.quiet_eval(left.left.right)) == 1):
                return "ceil", self.exprs.quiet_eval(left.left.left), seg(left.left.left), \
                    known_int(self.exprs.quiet_eval(left.right))
        if isinstance(node, ast.Call):
            callee = self.exprs.quiet_eval(node.func)
            name = callee.name if isinstance(callee, (Api, FuncRef)) else None
            short = name.rsplit(".", 1)[-1] if name else None
            if name == "math.ceil" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div):
                    return "ceil", self.exprs.quiet_eval(arg.left), seg(arg.left), \
                        known_int(self.exprs.quiet_eval(arg.right))
            if short in _CEIL_HELPERS and len(node.args) == 2:
                return "ceil", self.exprs.quiet_eval(node.args[0]), seg(node.args[0]), \
                    known_int(self.exprs.quiet_eval(node.args[1]))
            if name == "builtins.int" and node.args:
                return self.of(node.args[0])
        return None


def _additive_terms(node: ast.expr, sign: int = 1) -> list[tuple[int, ast.expr]]:
    """`a + b - c` -> [(+1, a), (+1, b), (-1, c)]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right_sign = sign if isinstance(node.op, ast.Add) else -sign
        return _additive_terms(node.left, sign) + _additive_terms(node.right, right_sign)
    return [(sign, node)]
