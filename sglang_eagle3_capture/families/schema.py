"""The shape of a target family's facts: a frozen record, standard library only."""

from __future__ import annotations

from dataclasses import dataclass

from ..releases.schema import Seam

PACKED = "packed"  # AuxHiddenStatePacker: one [T, K*H] tensor, chunks in ascending loop order
LIST = "list"  # a list of K [T, H] tensors in ascending loop order


@dataclass(frozen=True)
class Family:
    """SGLang model classes that share one capture loop, and how that loop captures.

    ``architectures``: HF ``architectures[0]`` values served by these classes (a draft trained on one
    serves any other with the same layer count and hidden size). ``causal_lm`` defines
    ``set_eagle3_layers_to_capture``; ``model`` is the decoder stack whose ``forward`` runs the capture
    loop (``model_attr`` reaches it from the causal LM, ``forward_params`` are its parameter names).
    ``container``: what the loop hands on (:data:`PACKED` or :data:`LIST`). ``embedding_in_loop``: loop
    index 0 is the embedding output (layer id -1) without crashing. ``final_norm``: the decoder stack's
    final norm attribute; a forward hook on it sees the last layer's output (layer id N-1).
    ``stock_rule``: how stock SGLang reads explicit ids (:mod:`~sglang_eagle3_capture.releases.schema`
    rules; a release file may override it). ``text_config``: architectures whose decoder dimensions live
    in ``config.json: text_config``.
    """

    name: str
    architectures: tuple[str, ...]
    module: str
    causal_lm: str
    model: str
    forward_params: tuple[str, ...]
    stock_rule: str
    model_attr: str = "model"
    container: str = PACKED
    embedding_in_loop: bool = True
    final_norm: str = "norm"
    text_config: tuple[str, ...] = ()

    def seams(self) -> tuple[Seam, ...]:
        """The attributes the capture patch replaces (or adds) for this family."""
        return (
            Seam("target.set_eagle3", self.module, self.causal_lm, "set_eagle3_layers_to_capture", ("self", "layer_ids")),
            Seam("target.forward", self.module, self.model, "forward", self.forward_params),
            Seam("target.feed_slot", self.module, self.model, "_eagle3_capture_feed", None),
        )
