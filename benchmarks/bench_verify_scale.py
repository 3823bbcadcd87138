"""``verify`` and ``plan`` at the size of the case behind this product: a Kimi-K2.5-shaped EAGLE-3 draft (hidden
7168, target vocab 163840, draft vocab 32000, 1 decoder layer, 64 heads of 128, intermediate 18432: the shape of the
published Kimi-K2/K2.5 SGLang-format drafts) with bf16 random weights written with safetensors, and legacy-layout
samples of 2048 tokens (the embedding chunk is the exact lookup of the ids, the other stored layers random), all
under a temporary directory.

Each command runs as its own process (the CLI, as a user runs it), one sample in memory at a time
(``--batch-size 1``), in the checkpoint's dtype (``--dtype checkpoint``: in fp32 the draft alone is 9.4 GB and its
load would hold it twice); peak RSS is that process's ``ru_maxrss`` (``os.wait4``). Results:
benchmarks/results/verify_scale.json.

Run: ``python benchmarks/bench_verify_scale.py [--samples 3] [--tokens 2048]`` (minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

HIDDEN, VOCAB, DRAFT_VOCAB, HEADS, HEAD_DIM, INTERMEDIATE = 7168, 163840, 32000, 64, 128, 18432
LAYERS, LAYER_IDS = 61, [-1, 29, 57]  # Kimi-K2.5's 61-layer DeepSeek-V3 language model; [-1, 29, 57] as in the case


def draft_config() -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
            "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1, "vocab_size": VOCAB,
            "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": HIDDEN, "num_aux_hidden_states": 3,
            "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 50000.0},
            "max_position_embeddings": 131072, "bias": False, "attention_bias": False, "norm_before_fc": False,
            "fc_norm": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "norm_before_residual": False,
            "eagle_aux_hidden_state_layer_ids": [0, 30, 58], "eagle_config": {"use_aux_hidden_state": True}}


def build_draft(d: Path) -> torch.Tensor:
    """Write the draft; returns its embedding (bf16) for the samples."""
    from safetensors.torch import save_file

    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(draft_config(), indent=2))
    (d / "eagle3_manifest.json").write_text(json.dumps({
        "format": "sglang-eagle3-capture.manifest", "version": 1, "layer_ids": LAYER_IDS,
        "target": {"architecture": "KimiK25ForConditionalGeneration", "num_hidden_layers": LAYERS,
                   "hidden_size": HIDDEN},
        "provenance": {"source": "manual", "note": "benchmarks/bench_verify_scale.py: random weights"}}, indent=2))
    g = torch.Generator().manual_seed(0)

    def rand(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    qkv = HEADS * HEAD_DIM
    w = {"embed_tokens.weight": rand(VOCAB, HIDDEN), "fc.weight": rand(HIDDEN, 3 * HIDDEN),
         "midlayer.input_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
         "midlayer.hidden_norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
         "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
         "midlayer.self_attn.q_proj.weight": rand(qkv, 2 * HIDDEN),
         "midlayer.self_attn.k_proj.weight": rand(qkv, 2 * HIDDEN),
         "midlayer.self_attn.v_proj.weight": rand(qkv, 2 * HIDDEN),
         "midlayer.self_attn.o_proj.weight": rand(HIDDEN, qkv),
         "midlayer.mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
         "midlayer.mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
         "midlayer.mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
         "norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16), "lm_head.weight": rand(DRAFT_VOCAB, HIDDEN)}
    vocab = torch.randperm(VOCAB, generator=g)[:DRAFT_VOCAB].sort().values
    w["d2t"] = vocab - torch.arange(DRAFT_VOCAB)
    save_file(w, str(d / "model.safetensors"))
    return w["embed_tokens.weight"]


def build_samples(d: Path, embed: torch.Tensor, n: int, tokens: int) -> None:
    """Legacy layout (fixtures/samples.py): data_i.pt with the embedding chunk, two random layers and the final."""
    d.mkdir(parents=True)
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        ids = torch.randint(0, VOCAB, (tokens,), generator=g)
        states = [embed[ids].clone()] + [torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
                                         for _ in range(3)]
        torch.save({"input_ids": ids, "hidden_states": states, "loss_mask": torch.ones(tokens, dtype=torch.long)},
                   d / f"data_{i}.pt")
    (d / "sample_lengths.json").write_text(json.dumps({str(i): tokens for i in range(n)}))
    (d / "data_config.json").write_text(json.dumps({"hidden_states": {"layer_ids": LAYER_IDS + [LAYERS - 1]}}))


def measured(cmd: list[str]) -> dict:
    """``cmd`` under a tiny wrapper that reports the child's own peak RSS (``os.wait4``)."""
    wrapper = ("import os,sys,json,time,subprocess;t=time.perf_counter();p=subprocess.Popen(sys.argv[1:],"
               "stdout=open(os.environ['OUT'],'w'));_,st,ru=os.wait4(p.pid,0);"
               "print(json.dumps({'rc':os.waitstatus_to_exitcode(st),'maxrss_kb':ru.ru_maxrss,"
               "'wall_s':round(time.perf_counter()-t,1),'cpu_s':round(ru.ru_utime+ru.ru_stime,1)}))")
    with tempfile.NamedTemporaryFile("r", suffix=".json") as f:
        r = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "OUT": f.name})
        info = json.loads(r.stdout.strip().splitlines()[-1])
        info["stderr_tail"] = r.stderr[-1500:]
        try:
            info["report"] = json.loads(open(f.name).read())
        except ValueError:
            info["report"] = None
    info["peak_rss_gib"] = round(info.pop("maxrss_kb") / 2 ** 20, 2)
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--settings", default="3,1,4 3,2,6")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verify-scale-") as tmp:
        t0 = time.perf_counter()
        embed = build_draft(Path(tmp) / "draft")
        build_samples(Path(tmp) / "samples", embed, a.samples, a.tokens)
        del embed
        build_s = time.perf_counter() - t0
        cli = [sys.executable, "-m", "sglang_eagle3_capture"]
        common = ["--data", str(Path(tmp) / "samples"), "--batch-size", "1", "--dtype", "checkpoint", "--threads",
                  str(a.threads), "--no-progress", "--json"]
        results = {}
        for name, cmd in (("verify", cli + ["verify", str(Path(tmp) / "draft")] + common),
                          ("plan", cli + ["plan", str(Path(tmp) / "draft"), "--settings", a.settings] + common)):
            r = measured(cmd)
            rep = r.pop("report") or {}
            tokens = a.samples * a.tokens
            r["tokens"] = tokens
            r["tokens_per_s"] = round(tokens / r["wall_s"], 1)
            if name == "verify":
                r["wirings"] = rep.get("throughput", {}).get("wirings")
                r["verdict"] = rep.get("summary")
                r["throughput"] = rep.get("throughput")
                r["positions"] = rep.get("positions")
            else:
                r["settings"] = [{k: s[k] for k in ("steps", "topk", "draft_tokens", "accept_length",
                                                    "per_position")} for s in rep.get("settings", [])]
                r["rollout_tokens_per_s"] = rep.get("tokens_per_s")
            results[name] = r
            print(name, json.dumps({k: v for k, v in r.items() if k != "stderr_tail"}), flush=True)
    doc = {"what": __doc__.split("\n\n")[0], "draft": {**draft_config(), "weights_gib": None},
           "samples": a.samples, "tokens_per_sample": a.tokens, "build_s": round(build_s, 1),
           "machine": {"cpus": os.cpu_count(), "mem_gib": round(os.sysconf("SC_PAGE_SIZE") *
                                                                 os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1),
                       "torch": torch.__version__},
           **results}
    params = (VOCAB + DRAFT_VOCAB) * HIDDEN + 3 * HIDDEN * HIDDEN + 3 * HEADS * HEAD_DIM * 2 * HIDDEN + \
        HIDDEN * HEADS * HEAD_DIM + 3 * INTERMEDIATE * HIDDEN
    doc["draft"]["weights_gib"] = round(params * 2 / 2 ** 30, 2)
    (RESULTS / "verify_scale.json").write_text(json.dumps(doc, indent=1) + "\n")
    # verify's verdict on random weights is its own business (exit 3: nothing tells the wirings apart); 2 or 70 fail
    return 0 if results["plan"]["rc"] == 0 and results["verify"]["rc"] in (0, 1, 3) else 1


if __name__ == "__main__":
    raise SystemExit(main())
