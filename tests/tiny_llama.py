"""A SmolLM-style tokenizer small enough for fast explorer tests: ChatML's special tokens and the 256 bytes."""

import torch

from helpers.gpt2_tokenizer import bytes_to_unicode
from helpers.llama import Llama, LlamaConfig
from helpers.smollm_tokenizer import SmolLMTokenizer


def byte_tokenizer() -> SmolLMTokenizer:
    """<|endoftext|>, <|im_start|> (bos), <|im_end|> (eos), then every byte as a token; no merges."""
    b2u = bytes_to_unicode()
    return SmolLMTokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", *(b2u[b] for b in range(256))], [], 1, 2)


def tiny_llama(tok: SmolLMTokenizer, **shape) -> Llama:
    """A random `Llama` for ``tok``, seeded, its embedding scaled up (tied head: logits spread out, so
    temperature and top-p visibly reshape the bars). ``shape``: LlamaConfig fields (small defaults)."""
    torch.manual_seed(0)
    config = {"d_model": 32, "n_layers": 3, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64, **shape}
    model = Llama(LlamaConfig(vocab_size=tok.vocab_size, **config)).eval()
    with torch.no_grad():
        model.tok_emb.weight.mul_(3)
        # Deep random stacks grow the residual stream: the logits' spread then depends on the seed (over 100
        # nats for some: all but a few tokens underflow to probability 0, and top-k moves nothing). Scale the
        # final norm so a probe prompt's logits span 12 nats whatever the seed.
        z = model(torch.tensor([tok.encode("The quick brown fox")]))[0, -1]  # (V,)
        model.norm.weight.mul_(12.0 / float(z.max() - z.min()))
    return model
