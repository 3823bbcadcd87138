"""Pre- or post-norm: whether a stored hidden state is the target's final norm output (layer id ``"final_norm"``)
or a residual stream, told from the samples themselves, since a file does not say which it holds.

An RMSNorm output ``y = x / rms(x) * w`` has ``rms(y / w) = 1`` for every token up to ``eps`` and rounding; a residual
stream has no reason to. A tensor is ``post-norm`` when at least :data:`POST` of its tokens are within :data:`UNIT`
of 1, ``pre-norm`` when at most :data:`PRE` are, else ``undecided``; a weight with a zero entry, or a norm of
another form (Gemma's ``(1 + w)``), is not measurable. Measurements: docs/troubleshooting.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

UNIT = 0.01  # |log rms(h_t / w)| <= UNIT: the token's state has unit RMS once divided by the norm weight
POST = 0.99  # at least this fraction of unit-RMS tokens: post-norm
PRE = 0.5  # at most this fraction: pre-norm (between: undecided)
POST_NORM, PRE_NORM, UNDECIDED = "post-norm", "pre-norm", "undecided"


@dataclass(frozen=True)
class NormState:
    """One stored tensor: how many of its ``tokens`` have unit RMS divided by the final norm weight, and the reading."""

    name: str
    tokens: int
    unit_tokens: int
    reading: str

    @property
    def unit_fraction(self) -> float:
        return self.unit_tokens / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "tokens": self.tokens, "unit_rms_fraction": round(self.unit_fraction, 4),
                "reading": self.reading}


def unit_rms_tokens(states: Any, weight: Any) -> int:
    """How many rows of ``states`` ``[T, H]`` have ``rms(h_t / weight)`` within :data:`UNIT` of 1 (log scale)."""
    import torch

    r = (states.float() / weight.float()).pow(2).mean(dim=-1).sqrt()
    return int((torch.log(r).abs() <= UNIT).sum())


def reading_of(unit_tokens: int, tokens: int) -> str:
    """:data:`POST_NORM`, :data:`PRE_NORM` or :data:`UNDECIDED` for a tensor with ``unit_tokens`` of ``tokens``."""
    if tokens == 0:
        return UNDECIDED
    fraction = unit_tokens / tokens
    return POST_NORM if fraction >= POST else PRE_NORM if fraction <= PRE else UNDECIDED


class NormStates:
    """Counts accumulated over samples, per stored tensor (``names``: the samples' chunk names, in order)."""

    def __init__(self, names: Sequence[str], weight: Any) -> None:
        self.names = tuple(names)
        self.weight = weight
        self.ok = bool((weight.float().abs() > 0).all())  # h / w is defined for every entry
        self.tokens = [0] * len(self.names)
        self.unit = [0] * len(self.names)

    def add(self, chunks: Sequence[Any]) -> None:
        if not self.ok:
            return
        for i, chunk in enumerate(chunks):
            self.tokens[i] += int(chunk.shape[0])
            self.unit[i] += unit_rms_tokens(chunk, self.weight)

    def result(self) -> list[NormState]:
        """One :class:`NormState` per stored tensor (every one ``undecided`` when the weight is not measurable)."""
        return [NormState(n, t, u, reading_of(u, t) if self.ok else UNDECIDED)
                for n, t, u in zip(self.names, self.tokens, self.unit)]
