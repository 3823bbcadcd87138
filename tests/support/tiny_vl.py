"""The image path of the tiny vision-language targets (support/tiny_models.py ``FAMILY_TARGETS["qwen3_vl"]``): a
processor that SGLang's multimodal front end loads offline, and a seeded image.

SGLang 0.5.23 loads a multimodal model's processor with ``AutoProcessor`` from the model path even under
``skip_tokenizer_init`` (managers/tokenizer_manager.py:610-631); its Qwen-VL processor decodes the request's token ids
with the processor's tokenizer and has the HF processor expand each ``<|image_pad|>`` to one token per merged patch
(multimodal/processors/base_processor.py:1293-1309). So the tiny checkpoint ships a word-level tokenizer over the
tiny vocabulary (``w0`` ... ``w249`` are ids 0-249, the vision tokens at the ids the config names), a Qwen2-VL image
processor with Qwen3-VL's 16-pixel patches and small pixel bounds, and Qwen3-VL's video processor (required by the
processor class), all built with transformers' own classes.
"""

from __future__ import annotations

from pathlib import Path

from support.tiny_models import VISION_TOKENS

EOS = "<|im_end|>"


def add_processor(model_dir) -> Path:
    """Save the tiny Qwen3-VL processor (tokenizer, image and video processors) into ``model_dir``."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(250)}
    vocab.update({**VISION_TOKENS, "<|endoftext|>": 254, EOS: 255})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # decode joins with spaces: the round trip keeps the ids
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token=EOS,
                                                pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    bounds = dict(size={"shortest_edge": 32 * 32, "longest_edge": 128 * 128}, patch_size=16, temporal_patch_size=2,
                  merge_size=2)
    processor = transformers.Qwen3VLProcessor(image_processor=transformers.Qwen2VLImageProcessor(**bounds),
                                              tokenizer=fast,
                                              video_processor=transformers.Qwen3VLVideoProcessor(**bounds))
    processor.save_pretrained(model_dir)
    return Path(model_dir)


def write_image(path, *, height: int = 64, width: int = 96, seed: int = 0) -> Path:
    """A seeded random RGB PNG (64x96: 4x6 patches of 16, merged 2x2 into 6 image tokens)."""
    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(seed).rand(height, width, 3) * 255).astype("uint8")
    Image.fromarray(pixels).save(path)
    return Path(path)


def hf_image_inputs(model_dir, prompt: list[int], image) -> dict:
    """What HF's processor makes of ``prompt`` (token ids with one ``<|image_pad|>``) and ``image``, as SGLang's
    front end makes it: the ids decoded by the tokenizer, then the text and image processed together."""
    import transformers
    from PIL import Image

    processor = transformers.AutoProcessor.from_pretrained(str(model_dir))
    text = processor.tokenizer.decode(prompt)
    return dict(processor(text=[text], images=[Image.open(image)], return_tensors="pt"))
