"""Small shared helpers for the algorithm tests."""

import torch

NAN = float("nan")


def t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def close(actual, expected, atol=1e-5):
    expected = torch.as_tensor(expected, dtype=torch.float32)
    torch.testing.assert_close(actual.float(), expected, atol=atol, rtol=0)
