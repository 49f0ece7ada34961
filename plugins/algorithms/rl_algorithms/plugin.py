"""Registers rl-algorithms' estimators, policy losses, DAPO's reward shaper and batch sampler, their config sections
(rl_algorithms.config) and their checks.

Imports no torch: factories are dotted paths loaded when a plan picks them.
"""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.algorithms.options import GroupOptions, GrpoOptions, LossOptions, ReturnsOptions
from rl_core.card_options import Options
from rl_core.cards import BatchSamplerCard, CheckCard, ConfigSectionCard, EstimatorCard, PolicyLossCard, RewardShapingCard

from rl_algorithms import options as opt

_EST = "rl_algorithms.estimators"
_GB = "rl_algorithms.group_baselines"
_PG = "rl_algorithms.policy_loss_pg"
_COV = "rl_algorithms.policy_loss_cov"
# losses whose per-token loss and gradient vanish with the advantage (A * f(ratio)): zero-advantage rows may be skipped
_ADVANTAGE_SCALED = frozenset({"gspo", "gpg", "cispo"})
_PG_OPTIONS = {"dro": opt.DroOptions, "sapo": opt.SapoOptions, "geo_mean": Options}  # the others: LossOptions


@hookimpl
def rl_core_register_advantage_estimators(register):
    for name, options, factory, needs, doc in (
        ("rloo", GroupOptions, f"{_EST}:rloo", "groups", "REINFORCE leave-one-out baseline (Ahmadian et al. 2024)"),
        ("reinforce_plus_plus", Options, f"{_EST}:reinforce_plus_plus", "", "discounted return-to-go, normalised over the batch (REINFORCE++, Hu 2025)"),
        ("reinforce_plus_plus_baseline", GroupOptions, f"{_EST}:reinforce_plus_plus_baseline", "groups",
         "group-mean baseline, then batch normalisation (REINFORCE++-baseline, Hu 2025)"),
        ("remax", Options, f"{_EST}:remax", "greedy", "return minus the greedy response's reward (ReMax, Li et al. 2023)"),
        ("opo", GroupOptions, f"{_GB}:opo", "groups", "score minus the group's length-weighted mean score (OPO, Hao et al. 2025)"),
        ("grpo_passk", opt.PassKOptions, f"{_GB}:grpo_passk", "groups",
         "only each group's best response gets r_max - r_second (pass@k training, Chen et al. 2025)"),
        ("gpg", opt.GpgOptions, f"{_GB}:gpg", "groups", "group-mean baseline scaled by batch size / non-zero scores (GPG, Chu et al. 2025)"),
        # verl's vectorised implementations (grpo's computes grpo's numbers; rloo's differs on groups of one)
        ("grpo_vectorized", GrpoOptions, "rl_core.algorithms.advantages:grpo", "groups", "verl's name for its vectorised grpo: the same estimator as grpo"),
        ("rloo_vectorized", ReturnsOptions, f"{_GB}:rloo_vectorized", "groups", "verl's vectorised rloo: rloo, but a group of one gets 0 (as verl's version does)"),
    ):
        register(EstimatorCard(name=name, options=options, factory=factory, description=doc,
                               needs_groups=needs == "groups", needs_greedy_baseline=needs == "greedy"))


@hookimpl
def rl_core_register_policy_losses(register):
    for name, factory, doc in (
        ("gspo", _PG, "sequence-level importance ratio and clipping (GSPO, Zheng et al. 2025)"),
        ("gpg", _PG, "plain policy gradient -A log pi, no ratio (GPG, Chu et al. 2025)"),
        ("dro", _PG, "policy gradient with a quadratic log-ratio penalty (needs policy_loss_options.dro_beta)"),
        ("cispo", _PG, "clipped, stop-gradient importance weight times A log pi (CISPO, MiniMax 2025)"),
        ("sapo", _PG, "smooth sigmoid gate instead of a hard clip (SAPO, Qwen 2025)"),
        ("geo_mean", _PG, "geometric mean of clipped token ratios per sequence (GMPO, Zhao et al. 2025)"),
        ("dppo_tv", _PG, "keep tokens whose probability moved less than a TV threshold (DPPO-Binary-TV)"),
        ("dppo_kl", _PG, "keep tokens whose binary KL stayed under a threshold (DPPO-Binary-KL)"),
    ):
        register(PolicyLossCard(name=name, factory=f"{factory}:{name}", description=doc, options=_PG_OPTIONS.get(name, LossOptions),
                                skips_zero_advantage=name in _ADVANTAGE_SCALED))
    register(PolicyLossCard(name="clip_cov", options=opt.ClipCovOptions, factory=f"{_COV}:clip_cov",
                            description="drop the gradient of a few high-covariance tokens (Clip-Cov, Cui et al. 2025)"))
    register(PolicyLossCard(name="kl_cov", options=opt.KlCovOptions, factory=f"{_COV}:kl_cov",
                            description="|log r| penalty on the highest-covariance tokens (KL-Cov, Cui et al. 2025)"))


@hookimpl
def rl_core_register_reward_shapers(register):
    register(RewardShapingCard(name="overlong_penalty", enabled_by="reward.overlong_penalty.enable", factory="rl_algorithms.overlong:make",
                               description="DAPO's overlong-response penalty on the training rewards (reward.overlong_penalty)"))


@hookimpl
def rl_core_register_batch_samplers(register):
    register(BatchSamplerCard(name="dynamic_sampling", enabled_by="algorithm.filter_groups.enable", factory="rl_algorithms.dynamic_sampling:make",
                              description="DAPO's dynamic sampling: generation rounds until enough groups' scores differ (algorithm.filter_groups)"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="overlong_penalty", stage="rules", order=50, factory="rl_algorithms.checks:overlong_penalty_problems",
                       description="reward.overlong_penalty: a buffer that fits in the length it counts back from"))
    register(CheckCard(name="filter_groups", stage="rules", order=50, factory="rl_algorithms.checks:filter_groups_problems",
                       description="algorithm.filter_groups: a metric, the synchronous loop, no greedy baseline"))


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="algorithm.filter_groups", factory="rl_algorithms.config:FilterGroupsConfig",
                               description="DAPO's dynamic sampling: enable, metric, max_num_gen_batches"))
    register(ConfigSectionCard(name="reward.overlong_penalty", factory="rl_algorithms.config:OverlongPenaltyConfig",
                               description="DAPO's overlong-response penalty: enable, buffer_length, penalty_factor, max_response_length, log"))
