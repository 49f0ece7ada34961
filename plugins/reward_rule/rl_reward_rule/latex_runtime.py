"""Make math-verify's LaTeX parser give the same answers under antlr4 runtime 4.9.3 as under 4.13.2.

math-verify parses LaTeX with ``latex2sympy2_extended``, which ships a parser generated for each supported antlr4
runtime and picks the one matching the installed runtime. Hydra and OmegaConf (``rl-core[verl]``, verl's command
line) pin ``antlr4-python3-runtime==4.9.*``, so wherever they are installed the 4.9.3 parser is used. That parser's
``AtomContext`` lacks the ``FUNC_GAMMA`` accessor the converter calls before it reaches percent numbers, so
``\\boxed{50\\%}`` and ``\\Gamma(5)`` fail to parse and score 0 where the 4.13.2 parser scores them 1.

:func:`ensure` adds the missing accessor (the same one the 4.13.2 parser defines), once, only when the 4.9.3
parser is the one in use and lacks it. ``tests/test_reward_rule_math.py`` runs its table under whichever runtime is
installed; the results were compared with a 4.13.2 install by hand (identical on the percent and Gamma cases).
"""

from __future__ import annotations

_done = False


def ensure() -> None:
    global _done
    if _done:
        return
    _done = True
    try:
        from importlib.metadata import version

        if not version("antlr4-python3-runtime").startswith("4.9"):
            return
        from latex2sympy2_extended.gen.antlr4_9_3.PSParser import PSParser
    except Exception:  # math-verify or its parser not installed: nothing to fix (the caller reports it)
        return
    atom = PSParser.AtomContext
    if not hasattr(atom, "FUNC_GAMMA") and hasattr(PSParser, "FUNC_GAMMA"):
        atom.FUNC_GAMMA = lambda self: self.getToken(PSParser.FUNC_GAMMA, 0)
