"""rl-algorithms: the long tail of RL algorithms for rl-core, registered through rl-core's public hooks.

==============================  ==============================================
module                          what
==============================  ==============================================
``estimators``                  rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax
``group_baselines``             opo, grpo_passk, gpg, rloo_vectorized
``policy_loss_pg``              gspo, gpg, dro, cispo, sapo, geo_mean, dppo_tv, dppo_kl
``policy_loss_cov``             clip_cov, kl_cov
``options``                     their options classes (``algorithm.options``, ``actor.policy_loss_options``)
``group_filter``                DAPO's group filter (groups of equal scores)
``dynamic_sampling``            DAPO's dynamic sampling (``algorithm.filter_groups``): a batch sampler
``overlong``                    DAPO's overlong penalty (``reward.overlong_penalty``): a reward shaper
``checks``                      the checks of those two
``plugin``                      the registrations (entry point ``algorithms`` of the group ``rl_core``)
==============================  ==============================================

rl-core itself keeps gae, grpo and the PPO clip losses (ppo_clip, dual_clip / vanilla).
"""
