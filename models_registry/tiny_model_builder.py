"""Build `tiny-coder`: a random-weight Llama with a locally trained BPE tokenizer.

Run with the engine venv (the Django venv has no torch):
    .venv-engine/bin/python models_registry/tiny_model_builder.py DIR

Its output is gibberish, but vLLM really loads and serves it on CPU, so the engine, tokens,
usage, streaming and metrics are real. Deterministic (fixed seed, sorted corpus); idempotent.
This file imports nothing from Switchyard: it must run outside Django.
"""
import argparse
import json
import sys
import sysconfig
from pathlib import Path

SEED = 20261130
VOCAB_SIZE = 3072
MAX_POSITIONS = 2048
CORPUS_FILES = 400  # enough Python for useful merges; keeps training to a few seconds
CORPUS_MAX_BYTES = 8_000_000
# Qwen2.5-Coder's fill-in-the-middle sentinels (the registry files tiny-coder under that family), so a
# prompt the gateway renders for it holds each sentinel as one special token, as on the real model.
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"]
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", *FIM_TOKENS]
# Bumped whenever the files would differ: a directory built by an older builder is rebuilt, not reused.
BUILD_FORMAT = 2
MARKER = "SWITCHYARD_TINY_MODEL.json"
# ChatML-like, so /v1/chat/completions works; generation stops at </s> or <|end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def is_complete(model_dir: Path) -> bool:
    """True when config, weights and tokenizer are all present, built by this builder's format (the
    build is then skipped)."""
    has_weights = any((model_dir / name).exists() for name in WEIGHT_FILES)
    files = (model_dir / "config.json").exists() and (model_dir / "tokenizer.json").exists() and has_weights
    return files and built_format(model_dir) == BUILD_FORMAT


def built_format(model_dir: Path) -> int | None:
    """The BUILD_FORMAT the directory was built with (None: no marker, or one from before formats)."""
    try:
        return json.loads((model_dir / MARKER).read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        return None


def corpus_files() -> list[Path]:
    """Python sources from the standard library, in a stable order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    return files[:CORPUS_FILES]


def corpus_lines():
    budget = CORPUS_MAX_BYTES
    for path in corpus_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        budget -= len(text)
        if budget < 0:
            return
        yield from text.splitlines(keepends=True)


def build_tokenizer(model_dir: Path):
    """Train a byte-level BPE on local Python source and wrap it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus_lines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="</s>", model_max_length=MAX_POSITIONS,
                                   additional_special_tokens=FIM_TOKENS)  # already in the vocabulary: no new ids
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(model_dir)
    return fast


def build_model(model_dir: Path, tokenizer) -> None:
    """A 2-layer Llama, head_dim 64 (the CPU attention backend rejects smaller heads)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True, torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(model_dir, safe_serialization=True)
    end_ids = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")]
    GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=end_ids).save_pretrained(model_dir)


def build(model_dir: Path, *, force: bool = False) -> str:
    """Build the model into `model_dir`; returns "built" or "exists"."""
    if is_complete(model_dir) and not force:
        return "exists"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / MARKER).unlink(missing_ok=True)  # written last: a build cut short is never taken as complete
    tokenizer = build_tokenizer(model_dir)
    build_model(model_dir, tokenizer)
    (model_dir / MARKER).write_text(json.dumps({"seed": SEED, "vocab_size": len(tokenizer), "format": BUILD_FORMAT,
                                                "fim_tokens": FIM_TOKENS}))
    return "built"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--force", action="store_true", help="rebuild even if the directory is complete")
    args = parser.parse_args(argv)
    outcome = build(args.model_dir.resolve(), force=args.force)
    print(f"{outcome}: {args.model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
