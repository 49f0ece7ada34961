"""The built-in ``calculator`` tool: exact arithmetic, parsed with :mod:`ast`, never ``eval``.

Numbers are exact rationals (:class:`fractions.Fraction`): ``0.1 + 0.2`` is
``0.3`` and ``1/3`` stays a third. Allowed: integer and decimal literals,
``+ - * / // % **``, unary ``+``/``-`` and parentheses. Anything else (names,
calls, attributes, strings, comparisons) is refused by name. Sizes are
bounded so a call cannot take the machine: an exponent beyond
:data:`MAX_EXPONENT`, an operand or result beyond :data:`MAX_DIGITS` digits,
or an expression longer than :data:`MAX_CHARS` is an error.
"""

from __future__ import annotations

import ast
from fractions import Fraction

MAX_CHARS = 500
MAX_EXPONENT = 1000
MAX_DIGITS = 2000
MAX_NODES = 200


class CalculatorError(ValueError):
    """An expression the calculator refuses (the message says why)."""


def _check_size(value: Fraction) -> Fraction:
    for part in (value.numerator, value.denominator):
        if abs(part).bit_length() > MAX_DIGITS * 3.33:
            raise CalculatorError(f"a number has more than {MAX_DIGITS} digits")
    return value


def _power(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1:
        raise CalculatorError("only whole-number exponents are exact; got a fractional exponent")
    if abs(exp.numerator) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exp.numerator} is beyond the limit of {MAX_EXPONENT}")
    if base == 0 and exp < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    bits = max(abs(base.numerator).bit_length(), abs(base.denominator).bit_length())
    if bits * abs(exp.numerator) > MAX_DIGITS * 3.33:
        raise CalculatorError(f"the result would have more than {MAX_DIGITS} digits")
    return base ** exp.numerator


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
    ast.Pow: _power,
}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        text = repr(node.value)
        return _check_size(Fraction(text) if isinstance(node.value, float) else Fraction(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        return _check_size(_BINARY[type(node.op)](left, right))
    what = type(node).__name__
    if isinstance(node, ast.BinOp):
        what = f"operator {type(node.op).__name__}"
    raise CalculatorError(f"{what} is not allowed; use numbers, + - * / // % ** and parentheses")


def format_number(value: Fraction) -> str:
    """An integer as is; otherwise the exact decimal when it terminates, else ``p/q`` (with a 12-digit decimal)."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den == 1:  # a terminating decimal: print it exactly
        sign = "-" if value < 0 else ""
        v = abs(value)
        digits = 0
        while (v * 10**digits).denominator != 1:
            digits += 1
        scaled = (v * 10**digits).numerator
        whole, frac = divmod(scaled, 10**digits)
        return f"{sign}{whole}.{str(frac).rjust(digits, '0')}"
    return f"{value.numerator}/{value.denominator} (~{float(value):.12g})"


def evaluate(expression: str) -> Fraction:
    """The exact value of ``expression`` (see the module docstring for what is allowed)."""
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"the expression has {len(expression)} characters, more than {MAX_CHARS}")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculatorError("the expression is empty")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"the expression has more than {MAX_NODES} parts")
    return _eval(tree)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "(12 + 7) * 3 / 4"
    """
    return format_number(evaluate(expression))
