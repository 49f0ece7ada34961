"""Registers the built-in estimators and policy losses through the public hooks.

This module is the ``builtin_algorithms`` entry point; it imports no torch:
factories are dotted paths loaded on first use. A third-party package
registers its own estimator exactly the same way::

    from rl_core import hookimpl
    from rl_core.cards import EstimatorCard

    @hookimpl
    def rl_core_register_advantage_estimators(register):
        register(EstimatorCard(name="my_est", factory="my_pkg.adv:my_est", needs_groups=True))
"""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.algorithms import options as opt
from rl_core.cards import EstimatorCard, PolicyLossCard
from rl_core.plugins import UnknownCardError

_ADV = "rl_core.algorithms.advantages"
_GB = "rl_core.algorithms.group_baselines"
_PG = "rl_core.algorithms.policy_loss"
_PG2 = "rl_core.algorithms.policy_loss_pg"
_COV = "rl_core.algorithms.policy_loss_cov"
_PG2_OPTIONS = {"dro": opt.DroOptions, "sapo": opt.SapoOptions, "geo_mean": opt.Options}  # the others: LossOptions


@hookimpl
def rl_core_register_advantage_estimators(register):
    register(EstimatorCard(
        name="gae", options=opt.GaeOptions, factory=f"{_ADV}:gae", needs_critic=True,
        description="Generalised Advantage Estimation with a critic (PPO; Schulman et al. 2015)",
    ))
    register(EstimatorCard(
        name="grpo", options=opt.GrpoOptions, factory=f"{_ADV}:grpo", needs_groups=True,
        description="group-normalised outcome advantage (DeepSeekMath 2024); norm_adv_by_std=False is Dr. GRPO",
    ))
    register(EstimatorCard(
        name="rloo", options=opt.GroupOptions, factory=f"{_ADV}:rloo", needs_groups=True,
        description="REINFORCE leave-one-out baseline (Ahmadian et al. 2024)",
    ))
    register(EstimatorCard(
        name="reinforce_plus_plus", options=opt.Options, factory=f"{_ADV}:reinforce_plus_plus",
        description="discounted return-to-go, normalised over the batch (REINFORCE++, Hu 2025)",
    ))
    register(EstimatorCard(
        name="reinforce_plus_plus_baseline", options=opt.GroupOptions, factory=f"{_ADV}:reinforce_plus_plus_baseline",
        needs_groups=True,
        description="group-mean baseline, then batch normalisation (REINFORCE++-baseline, Hu 2025)",
    ))
    register(EstimatorCard(
        name="remax", options=opt.Options, factory=f"{_ADV}:remax", needs_greedy_baseline=True,
        description="return minus the greedy response's reward (ReMax, Li et al. 2023)",
    ))
    register(EstimatorCard(
        name="opo", options=opt.GroupOptions, factory=f"{_GB}:opo", needs_groups=True,
        description="score minus the group's length-weighted mean score (OPO, Hao et al. 2025)",
    ))
    register(EstimatorCard(
        name="grpo_passk", options=opt.PassKOptions, factory=f"{_GB}:grpo_passk", needs_groups=True,
        description="only each group's best response gets r_max - r_second (pass@k training, Chen et al. 2025)",
    ))
    register(EstimatorCard(
        name="gpg", options=opt.GpgOptions, factory=f"{_GB}:gpg", needs_groups=True,
        description="group-mean baseline scaled by batch size / non-zero scores (GPG, Chu et al. 2025)",
    ))
    # verl's vectorised implementations (grpo's computes grpo's numbers; rloo's differs on groups of one)
    register(EstimatorCard(
        name="grpo_vectorized", options=opt.GrpoOptions, factory=f"{_ADV}:grpo", needs_groups=True,
        description="verl's name for its vectorised grpo: the same estimator as grpo",
    ))
    register(EstimatorCard(
        name="rloo_vectorized", options=opt.ReturnsOptions, factory=f"{_GB}:rloo_vectorized", needs_groups=True,
        description="verl's vectorised rloo: rloo, but a group of one gets 0 (as verl's version does)",
    ))


@hookimpl
def rl_core_register_policy_losses(register):
    register(PolicyLossCard(
        name="ppo_clip", options=opt.LossOptions, factory=f"{_PG}:ppo_clip",
        description="PPO clipped surrogate with separate low/high ranges (PPO 2017; DAPO clip-higher 2025)",
    ))
    register(PolicyLossCard(
        name="dual_clip", options=opt.LossOptions, factory=f"{_PG}:dual_clip",
        description="dual-clip PPO: caps the loss of negative-advantage tokens at -A*clip_ratio_c (Ye et al. 2020)",
    ))
    register(PolicyLossCard(
        name="vanilla", options=opt.LossOptions, factory=f"{_PG}:dual_clip",
        description="verl's default: PPO clip plus the dual clip on negative advantages (clip_ratio_c)",
    ))
    for name, doc in (
        ("gpg", "plain policy gradient -A log pi, no ratio (GPG, Chu et al. 2025)"),
        ("dro", "policy gradient with a quadratic log-ratio penalty (needs policy_loss_options.dro_beta)"),
        ("cispo", "clipped, stop-gradient importance weight times A log pi (CISPO, MiniMax 2025)"),
        ("sapo", "smooth sigmoid gate instead of a hard clip (SAPO, Qwen 2025)"),
        ("geo_mean", "geometric mean of clipped token ratios per sequence (GMPO, Zhao et al. 2025)"),
        ("dppo_tv", "keep tokens whose probability moved less than a TV threshold (DPPO-Binary-TV)"),
        ("dppo_kl", "keep tokens whose binary KL stayed under a threshold (DPPO-Binary-KL)"),
    ):
        register(PolicyLossCard(name=name, factory=f"{_PG2}:{name}", description=doc, options=_PG2_OPTIONS.get(name, opt.LossOptions)))
    register(PolicyLossCard(
        name="clip_cov", options=opt.ClipCovOptions, factory=f"{_COV}:clip_cov",
        description="drop the gradient of a few high-covariance tokens (Clip-Cov, Cui et al. 2025)",
    ))
    register(PolicyLossCard(
        name="kl_cov", options=opt.KlCovOptions, factory=f"{_COV}:kl_cov",
        description="|log r| penalty on the highest-covariance tokens (KL-Cov, Cui et al. 2025)",
    ))
    register(PolicyLossCard(
        name="gspo", options=opt.LossOptions, factory=f"{_PG}:gspo",
        description="sequence-level importance ratio and clipping (GSPO, Zheng et al. 2025)",
    ))


def builtin_card(kind: str, name: str) -> EstimatorCard | PolicyLossCard:
    """The built-in ``estimator`` / ``policy_loss`` card named ``name``, without the registry: for code that runs
    without a plan (tests, notebooks). A run uses the plan's loaded cards; a plugin's name is not found here."""
    found: list = []
    (rl_core_register_advantage_estimators if kind == "estimator" else rl_core_register_policy_losses)(found.append)
    cards = {c.name: c for c in found}
    if name not in cards:
        raise UnknownCardError(f"no built-in {kind} named {name!r} (built in: {', '.join(sorted(cards))}); a plugin's {kind} comes "
                          "from the run's plan, or pass its registry")
    return cards[name]
