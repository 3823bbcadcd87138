"""SGLang's EAGLE-3 draft (models/llama_eagle3.py) in plain PyTorch, one teacher-forced step over whole sequences;
``norm_before_residual`` applied as core/sglang/draft.py serves it. No sliding window, multi-step decode or tree
attention (serving-only). Also trains the fixture's draft (fixtures/)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..core.checkpoint import module_name, sglang_checkpoint_name, tensor_index
from ..core.draft_config import DraftConfig, Yarn
from ..core.errors import InputError, brief
from ..core.userfiles import read_json_object

__all__ = ["DraftConfig", "Eagle3Draft", "check_checkpoint", "eagle3_shift"]


class RMSNorm(nn.Module):
    """SGLang's ``RMSNorm.forward_native``: fp32 math, optional fused residual add."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x, residual=None):
        dtype = x.dtype
        x = x.float()
        if residual is not None:
            x = x + residual.float()
            residual = x.to(dtype)
        x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(dtype)
        return x if residual is None else (x, residual)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_frequencies(d: int, theta: float, yarn: Yarn | None = None) -> tuple[torch.Tensor, float]:
    """``(inv_freq [d/2], magnitude)`` as SGLang 0.5.23's ``RotaryEmbedding`` / layers/rotary_embedding/yarn.py."""
    pos_freqs = theta ** (torch.arange(0, d, 2, dtype=torch.float) / d)
    if yarn is None:
        return 1.0 / pos_freqs, 1.0

    def dim_of(rotations: float) -> float:
        return d * math.log(yarn.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(yarn.beta_fast), dim_of(yarn.beta_slow)
    if yarn.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(d // 2, dtype=torch.float) - low) / (high - low)).clamp(0, 1)
    extrapolated = (1 - ramp) * yarn.extrapolation_factor
    inv_freq = 1.0 / (yarn.factor * pos_freqs) * (1 - extrapolated) + 1.0 / pos_freqs * extrapolated
    magnitude = (_yarn_mscale(yarn.factor, yarn.mscale) / _yarn_mscale(yarn.factor, yarn.mscale_all_dim)
                 if yarn.mscale is not None and yarn.mscale_all_dim is not None else _yarn_mscale(yarn.factor))
    return inv_freq, float(magnitude) * yarn.attn_factor


def rope(x: torch.Tensor, positions: torch.Tensor, c: DraftConfig) -> torch.Tensor:
    """Neox-style RoPE of ``x`` ``[B, T, heads, D]`` (fp32 cos/sin, magnitude applied before the cast, as SGLang)."""
    inv_freq, magnitude = rope_frequencies(x.shape[-1], c.rope_theta, c.yarn)
    freqs = positions.float()[..., None] * inv_freq.to(x.device)
    cos, sin = ((f * magnitude)[..., None, :].to(x.dtype) for f in (freqs.cos(), freqs.sin()))
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class _Attention(nn.Module):
    def __init__(self, c: DraftConfig, in_features: int):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(in_features, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(in_features, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(in_features, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=c.o_proj_bias)

    def qkv(self, x, positions):
        """``q, k, v`` ``[N, T, heads, D]`` of ``x`` ``[..., T, in]``, RoPE on ``q`` and ``k``."""
        c, shape = self.c, (-1, x.shape[-2])
        q = rope(self.q_proj(x).view(*shape, c.num_attention_heads, c.head_dim), positions, c)
        k = rope(self.k_proj(x).view(*shape, c.num_key_value_heads, c.head_dim), positions, c)
        return q, k, self.v_proj(x).view(*shape, c.num_key_value_heads, c.head_dim)

    def forward(self, x, positions):
        q, k, v = self.qkv(x, positions)
        k, v = (y.repeat_interleave(self.c.num_attention_heads // self.c.num_key_value_heads, dim=2) for y in (k, v))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, scale=self.c.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:2], -1))


class _MLP(nn.Module):
    def __init__(self, c: DraftConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, c: DraftConfig, index: int):
        super().__init__()
        self.is_input_layer = index == 0
        self.norm_before_residual = c.norm_before_residual
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = _Attention(c, 2 * c.hidden_size if self.is_input_layer else c.hidden_size)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = _MLP(c)

    def forward(self, positions, embeds, x, residual, attend=None):
        """``attend(self_attn, x)`` replaces ``self_attn(x, positions)`` when given (doctor/rollout.py's draft KV)."""
        if self.is_input_layer:
            normed = self.hidden_norm(x)
            residual = normed if self.norm_before_residual else x
            x = torch.cat([self.input_layernorm(embeds), normed], dim=-1)
        else:
            x, residual = self.hidden_norm(x, residual)
        x = self.self_attn(x, positions) if attend is None else attend(self.self_attn, x)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class Eagle3Draft(nn.Module):
    """SGLang's ``LlamaForCausalLMEagle3`` math as a plain module; parameter names follow SGLang's checkpoints."""

    def __init__(self, config: DraftConfig):
        super().__init__()
        c = self.config = config
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.input_norm = RMSNorm(c.fc_in_features, c.rms_norm_eps) if c.norm_before_fc else None
        self.fc_norm = (nn.ModuleList([RMSNorm(c.target_hidden_size, c.rms_norm_eps)
                                       for _ in range(c.num_aux_hidden_states)]) if c.fc_norm else None)
        self.fc = nn.Linear(c.fc_in_features, c.hidden_size, bias=c.fc_bias)
        self.layers = nn.ModuleList([_Layer(c, i) for i in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
        self.embedding_source = "draft"

    def forward(self, input_ids: torch.Tensor, aux_hidden: torch.Tensor,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Draft logits ``[B, T, draft_vocab]``. ``input_ids``: the tokens after each aux position (EAGLE's shift);
        ``aux_hidden``: ``[B, T, num_aux * target_hidden]`` in fc chunk order. Right padding is exact (causal)."""
        if aux_hidden.shape[:2] != input_ids.shape or aux_hidden.shape[-1] != self.config.fc_in_features:
            raise ValueError(f"aux_hidden {tuple(aux_hidden.shape)} does not fit input_ids {tuple(input_ids.shape)} "
                             f"and fc width {self.config.fc_in_features}")
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        embeds = self.embed_tokens(input_ids)
        x, residual = self.fc_in(aux_hidden.to(embeds.dtype)), None
        for layer in self.layers:
            x, residual = layer(positions, embeds, x, residual)
        return F.linear(self.norm(x, residual)[0], self.embed_tokens.weight if self.lm_head is None else
                        self.lm_head.weight)

    def fc_in(self, x: torch.Tensor) -> torch.Tensor:
        """``fc(fc_norm(input_norm(x)))``, or ``x`` when already H wide (llama_eagle3.py: fc on a width mismatch)."""
        if x.shape[-1] == self.config.hidden_size:
            return x
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.fc_norm is not None:
            chunks = x.chunk(self.config.num_aux_hidden_states, dim=-1)
            x = torch.cat([n(ch) for n, ch in zip(self.fc_norm, chunks)], dim=-1)
        return self.fc(x)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocab ids to target ids (``target = draft + d2t[draft]``, SGLang's ``hot_token_id``)."""
        return draft_ids + self.d2t[draft_ids]

    @classmethod
    def from_pretrained(cls, draft_dir: str | Path, *, target_embed: torch.Tensor | None = None,
                        target_lm_head: torch.Tensor | None = None, target_where: str | None = None,
                        dtype: torch.dtype | None = None) -> "Eagle3Draft":
        """An SGLang draft dir read as SGLang loads it (shapes checked on the headers first); ``target_embed`` replaces
        the embedding when hidden sizes match, as SGLang's EAGLE-3 worker does (``embedding_source`` says which)."""
        from safetensors.torch import load_file

        d = Path(draft_dir)
        cfg_path = d / "config.json"
        config = DraftConfig.from_dict(read_json_object(cfg_path, fix="pass the draft directory holding the draft's "
                                                        "config.json"), where=str(cfg_path))
        index = tensor_index(d)
        check_checkpoint(config, index, cfg_path, target_embed=target_embed, target_lm_head=target_lm_head,
                         target_where=target_where)
        if dtype is None:
            model = cls(config)
        else:
            with torch.device("meta"):
                model = cls(config)
            model.d2t = torch.zeros(config.draft_vocab_size, dtype=torch.long)  # the file's d2t, when it has one
        weights: dict = {}
        for f in sorted({info.file for info in index.values()}):
            try:
                weights.update(load_file(str(f)))
            except Exception as e:  # noqa: BLE001 - safetensors' own error type; the header was fine, the data not
                raise InputError(f, "<data>", f"cannot load ({brief(str(e).splitlines()[0], 160)})",
                                 "re-export or re-download the checkpoint") from None
        own = model.state_dict()  # the tensors, by SGLang's names, that check_checkpoint accepted
        loaded, model.ignored_weights = {}, []
        to = torch.float32 if dtype is None else dtype
        for name, tensor in weights.items():
            key = module_name(name)
            if key == "d2t":
                loaded["d2t"] = tensor.long()
            elif key in own and not (key == "lm_head.weight" and config.lm_head_from_target):
                loaded[key] = tensor.to(to)
            elif key != "t2d" and not (key == "lm_head.weight" and config.lm_head_from_target):
                model.ignored_weights.append(name)  # SGLang's load_weights drops these without a word
        if target_embed is not None and config.target_hidden_size == config.hidden_size:
            loaded["embed_tokens.weight"], model.embedding_source = target_embed.to(to), "target"
        if config.lm_head_from_target:  # set_embed_and_head() replaces whatever the file held
            loaded["lm_head.weight"] = target_lm_head.to(to)
        model.load_state_dict(loaded, strict=False, assign=dtype is not None)
        if model.ignored_weights:
            warnings.warn(f"{d}: SGLang ignores these weights, so they are ignored here too: {model.ignored_weights}")
        return model.eval()

    def sglang_state_dict(self) -> dict:
        """Tensors under SGLang's checkpoint names (single layer as ``midlayer.*``), with ``d2t``/``t2d``."""
        one = self.config.num_hidden_layers == 1
        out = {(sglang_checkpoint_name(k) if one else k): v.detach().clone().contiguous()
               for k, v in self.state_dict().items()}
        out["t2d"] = torch.zeros(self.config.vocab_size, dtype=torch.bool)
        out["t2d"][self.to_target_ids(torch.arange(self.config.draft_vocab_size))] = True
        return out


def check_checkpoint(config: DraftConfig, index: dict, cfg_path: Path | str, *, target_embed=None,
                     target_lm_head=None, target_where: str | None = None) -> None:
    """Every shape ``config`` implies, checked on the headers (the model is built on ``meta`` only after its layer
    count and fc width were checked)."""
    cfg, disagree = cfg_path, "the config and the weights disagree: re-export the draft, or correct the config"
    keys = {module_name(n): n for n in index}
    fc = keys.get("fc.weight")
    if fc is None:
        raise InputError(cfg, "fc.weight", "weight missing from the safetensors", "point at a complete EAGLE-3 draft")
    fc_info = index[fc]
    if len(fc_info.shape) != 2 or fc_info.shape[1] != config.fc_in_features:
        raise InputError(fc_info.file, fc, f"weight of shape {fc_info.shape}, but {brief(str(cfg), 200)} "
                         f"implies ({config.hidden_size}, {config.fc_in_features}) (num_aux_hidden_states "
                         f"{config.num_aux_hidden_states} x target_hidden_size {config.target_hidden_size})",
                         disagree)
    stored_layers = {int(p) for k in keys if k.startswith("layers.") and (p := k.split(".", 2)[1]).isascii()
                     and p.isdigit()}
    if config.num_hidden_layers > len(stored_layers):
        raise InputError(cfg, "num_hidden_layers", f"{config.num_hidden_layers} layers, but the checkpoint "
                         f"holds weights for {len(stored_layers)}", disagree)
    if config.lm_head_from_target and target_lm_head is None:
        raise InputError(cfg, "draft_vocab_size", "absent, so SGLang takes lm_head from the target",
                         "pass --target TARGET (pass the target's lm_head weight)")
    with torch.device("meta"):
        own = {k: tuple(v.shape) for k, v in Eagle3Draft(config).state_dict().items()}
    provided = set()
    for key, name in keys.items():
        info = index[name]
        if key == "d2t":
            if info.shape != (config.draft_vocab_size,) or info.dtype not in ("I64", "I32"):
                raise InputError(info.file, name, f"{info.dtype} {list(info.shape)}, but the config implies "
                                 f"integers of shape [{config.draft_vocab_size}] (draft_vocab_size)", disagree)
            provided.add(key)
        elif key in own and not (key == "lm_head.weight" and config.lm_head_from_target):
            if info.shape != own[key]:
                raise InputError(info.file, name, f"weight of shape {info.shape}, but the config implies "
                                 f"{own[key]}", disagree)
            provided.add(key)
    embed_used = target_embed if config.target_hidden_size == config.hidden_size else None
    for key, tensor, what in (("embed_tokens.weight", embed_used, "embedding"),
                              ("lm_head.weight", target_lm_head, "lm_head")):
        if tensor is not None:  # lm_head_from_target without target_lm_head was refused above
            if tuple(tensor.shape) != own[key]:
                raise InputError(target_where or "target", key, f"the target's {what} has shape "
                                 f"{list(tensor.shape)}, but the draft ({brief(str(cfg), 200)}) needs "
                                 f"{list(own[key])}", "pass the target the draft was trained against")
            provided.add(key)
    missing = sorted(set(own) - provided - {"d2t"})
    if missing:
        fix = "pass --target TARGET (SGLang drafts take the target's embedding)" if missing == [
            "embed_tokens.weight"] else "re-export the checkpoint"
        raise InputError(cfg, missing[0], f"weights {brief(missing)} are missing from the safetensors", fix)
    if config.draft_vocab_size != config.vocab_size and "d2t" not in provided:
        raise InputError(cfg, "d2t", "no 'd2t' tensor but draft_vocab_size != vocab_size (SGLang needs d2t to "
                         "map draft ids to target ids)", "re-export the checkpoint")


def eagle3_shift(input_ids: torch.Tensor, aux_hidden: torch.Tensor, target_ids: torch.Tensor,
                 loss_mask: torch.Tensor):
    """EAGLE's alignment (speculators ``shift_batch``), one shorter: position ``t`` reads ``aux[t]`` and
    ``input_ids[t+1]``, scored against ``target_ids[t+1]`` where ``loss_mask[t+1]``."""
    return (input_ids[..., 1:], aux_hidden[..., :-1, :], target_ids[..., 1:], loss_mask[..., 1:].bool())
