"""Write a tiny random-weight Llama with its own tokenizer to a directory (for real-vLLM tests).

Run with the Python that has torch, transformers and tokenizers (the vLLM CPU environment):

    python tests/server/tiny_llama.py OUT_DIR

The model has head dim 32 (vLLM's CPU attention supports 32, 64, 80, ...; 16 fails at the first
step), 2 layers, hidden size 128 and a 512-token byte-level BPE vocabulary trained on a fixed
in-memory corpus, so the files are identical run to run apart from the random weights (seeded).
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "hello world, this is a tiny test corpus for a random model.",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "user assistant system: please summarize, classify and extract the following text.",
] * 50

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def main(out_dir: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
