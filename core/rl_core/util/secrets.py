"""Secrets recognised by the shape of a value, whatever key holds it (key names: ``rl_core.config.load.looks_secret``):
passwords in URLs, authorization values, known token formats, secret query parameters. Only the secret part becomes
``***``. :func:`mask_text` applies to every config string printed, saved or handed to a tracker, and to error
messages that echo a value.
"""

from __future__ import annotations

import re

MASK = "***"

_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)")
_URL_TOKEN_USER = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?=(?:gh[pousr]_|hf_|sk-|glpat-)[^/\s@]*@)[^/\s@]+")
_AUTH_HEADER = re.compile(r"(?P<head>\b(?:Bearer|Basic|Token)\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_QUERY = re.compile(r"(?P<head>[?&;](?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd|sig|signature)=)[^&#\s]+", re.IGNORECASE)
_TOKENS = re.compile(
    r"\b(?:"
    r"sk-[A-Za-z0-9_-]{8,}"  # OpenAI / Anthropic style
    r"|hf_[A-Za-z0-9]{8,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{16,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key id
    r"|AIza[A-Za-z0-9_-]{30,}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # a JWT
    r")"
)


def mask_text(text: str) -> str:
    """``text`` with every secret-shaped part replaced by ``***``."""
    if not isinstance(text, str) or len(text) < 8:
        return text
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    text = _URL_TOKEN_USER.sub(lambda m: m.group("head") + MASK, text)
    text = _AUTH_HEADER.sub(lambda m: m.group("head") + MASK, text)
    text = _QUERY.sub(lambda m: m.group("head") + MASK, text)
    return _TOKENS.sub(MASK, text)
