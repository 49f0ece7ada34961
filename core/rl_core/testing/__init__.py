"""Test helpers still shipped with the core, until their feature packages take them.

The test kit (conformance suites, tiny models, the distributed test runner,
the minimal backend) is the distribution ``rl-core-testing`` (``plugins/testing``,
import ``rl_core_testing``). Left here: ``agent_fixtures``, ``reward_model_task``
and ``reward_tokenizer`` (the agent and reward-model plugins take them).
"""
