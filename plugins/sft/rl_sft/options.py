"""``trainer.kind_options`` of ``trainer.kind=sft`` (checked by `rlcore check` against :class:`SFTOptions`)."""

from __future__ import annotations

from typing import Literal

import attrs
from rl_core.card_options import Options


@attrs.frozen(kw_only=True)
class SFTOptions(Options):
    #: a prompt / response row's response (verl's data.response_key); the prompt is data.prompt_key's (verl's too)
    response_key: str = "response"
    #: a chat row's messages (verl's data.multiturn.messages_key); a row with this key is a conversation
    messages_key: str = "messages"
    #: a chat row's tool schemas, rendered by the chat template (verl's data.multiturn.tools_key)
    tools_key: str = "tools"
    #: tokens per sequence (verl's data.max_length); None: data.max_prompt_length + data.max_response_length
    max_length: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.gt(0)))
    #: a longer sequence: refused (error) or its end cut off (right) (verl's data.truncation)
    truncation: Literal["error", "right"] = "error"
