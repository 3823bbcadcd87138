"""The draft vocabulary's blind spot: target tokens outside it, which training validation does not count as misses.

Serving always rejects such a position; speculators' validation scores the draft against the target's argmax over
the *draft* vocabulary (speculators 0.9.0 ``models/eagle3/core.py:251-252``, ``model.py:178-186``,
``models/eagle3/metrics.py:100-101``, ``models/metrics.py:52``), so it counts a hit there. docs/troubleshooting.md
("Validation said 0.93, serving accepts 0.90") explains the figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TargetHead:
    """The target's head over the draft vocabulary: ``rows`` ``[draft vocab, H]`` in draft-id order, and the final
    norm for a pre-norm stored state (``norm_weight`` ``None``: the state is already the norm's output)."""

    rows: Any
    norm_weight: Any
    eps: float

    def argmax(self, states: Any) -> Any:
        """Draft ids of the target's best in-vocabulary token for ``states`` ``[..., H]``."""
        import torch

        x = states.float()
        if self.norm_weight is not None:
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight.float()
        return (x @ self.rows.float().T).argmax(-1)


@dataclass
class VocabGap:
    """Counts for one wiring over ``verify``'s scored positions; ``head`` is ``None`` when speculators' figure
    cannot be computed, ``why`` says why."""

    in_vocab: Any
    draft_vocab_size: int
    head: TargetHead | None = None
    why: str = ""
    positions: int = 0
    out_of_vocab: int = 0
    correct: int = 0
    restricted_correct: int = 0

    @classmethod
    def of_draft(cls, d2t: Any, target_vocab_size: int, head: TargetHead | None = None, why: str = "") -> "VocabGap":
        """From the draft's ``d2t`` offsets and the target's vocabulary size."""
        import torch

        ids = torch.arange(d2t.shape[0]) + d2t.long()
        in_vocab = torch.zeros(target_vocab_size, dtype=torch.bool)
        in_vocab[ids] = True
        return cls(in_vocab, int(d2t.shape[0]), head, why)

    def add(self, labels: Any, scored: Any, top1_draft_ids: Any, top1_target_ids: Any, target_states: Any = None
            ) -> None:
        """One batch, all ``[B, T]``: ``labels`` (target ids), ``scored``, the draft's top-1 as draft and target ids;
        ``target_states`` ``[B, T, H]``."""
        oov = ~self.in_vocab[labels]
        self.positions += int(scored.sum())
        self.out_of_vocab += int((oov & scored).sum())
        self.correct += int(((top1_target_ids == labels) & scored).sum())
        if self.head is not None and target_states is not None:
            restricted = self.head.argmax(target_states)
            self.restricted_correct += int(((top1_draft_ids == restricted) & scored).sum())

    @property
    def exact(self) -> bool:
        """Whether speculators' figure was computed (else only its bound is known)."""
        return self.head is not None

    @property
    def oov_fraction(self) -> float:
        return self.out_of_vocab / self.positions if self.positions else 0.0

    @property
    def top1(self) -> float:
        """Top-1 with out-of-vocabulary targets counted as misses (what serving can accept)."""
        return self.correct / self.positions if self.positions else 0.0

    @property
    def speculators_top1(self) -> float | None:
        """Top-1 as speculators' validation scores it (``None`` when not computed)."""
        if not self.exact:
            return None
        return self.restricted_correct / self.positions if self.positions else 0.0

    @property
    def speculators_top1_bound(self) -> float:
        """The most speculators' figure can exceed :attr:`top1` by: every out-of-vocabulary position counted a hit."""
        return min(1.0, self.top1 + self.oov_fraction)

    def to_dict(self) -> dict:
        return {"draft_vocab_size": self.draft_vocab_size, "target_vocab_size": int(self.in_vocab.shape[0]),
                "positions": self.positions, "out_of_vocab": self.out_of_vocab,
                "out_of_vocab_fraction": round(self.oov_fraction, 6), "top1_oov_as_miss": round(self.top1, 6),
                "speculators_top1": None if self.speculators_top1 is None else round(self.speculators_top1, 6),
                "speculators_top1_upper_bound": round(self.speculators_top1_bound, 6),
                "why_not_computed": None if self.exact else self.why}

    def lines(self) -> list[str]:
        n, v = self.draft_vocab_size, int(self.in_vocab.shape[0])
        out = [f"draft vocabulary {n} of {v} target ids: {self.oov_fraction:.1%} of the scored target tokens "
               f"({self.out_of_vocab} of {self.positions}) are outside it; served, they are always rejected",
               f"top-1 counting them as misses {self.top1:.3f} (what serving can accept)"]
        if self.exact:
            gap = self.speculators_top1 - self.top1
            out.append(f"top-1 as speculators' validation scores it {self.speculators_top1:.3f} (the target's argmax "
                       f"over the draft vocabulary; {gap:+.3f} over what serving can accept)")
        else:
            out.append(f"speculators' validation (the target's argmax over the draft vocabulary) can report up to "
                       f"{self.speculators_top1_bound:.3f}; not computed: {self.why}")
        return out
