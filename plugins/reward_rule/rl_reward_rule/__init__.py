"""rl-reward-rule: rule-based rewards for rl-core (gsm8k, math, format, reasoning_gym).

Importing this package is cheap; each scorer module imports its heavy
dependency (math-verify, reasoning-gym) only when it first scores.
"""

__version__ = "0.1.0"
