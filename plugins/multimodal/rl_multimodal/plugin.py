"""rl-multimodal's cards: the feature object core calls for prompts with images, and its checks."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, FeatureCard


@hookimpl
def rl_core_register_features(register):
    register(FeatureCard(name="multimodal", factory="rl_multimodal.feature:enabled", provides="rl_multimodal.feature:FEATURE",
                         description="prompts with images (verl's multimodal rows): the processor's ids and pixels, VLM forwards"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="images", stage="files", order=11, factory="rl_multimodal.checks:image_problems",
                       description="rows with images: a vision model, and backends / estimator that carry them"))
    register(CheckCard(name="image_patch_size", stage="files", order=35, factory="rl_multimodal.checks:patch_size_problems",
                       description="data.image_patch_size against the model folder's image processor"))
