#!/usr/bin/env python3
"""A plain Hugging Face Trainer loop, as users write one: a small GPT-2 built from its config (nothing is
downloaded), random token ids, `Trainer.train()`. Launched by torchrun (clusterctl), it runs DDP through
Accelerate; the only choice made for the one-GPU check is `ddp_backend` (gloo when two ranks share a GPU).

    trainer_job.py --backend nccl|gloo --steps N --out DIR [--deepspeed CONFIG.json]

`--deepspeed` is TrainingArguments' own (a DeepSpeed config, e.g. ZeRO-2), as HF's example scripts pass it.
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, count: int, length: int, vocab: int):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (count, length), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--out", default="/tmp/trainer-out")
    parser.add_argument("--deepspeed", default=None)
    args = parser.parse_args()
    config = GPT2Config(n_layer=6, n_head=8, n_embd=512, vocab_size=8192, n_positions=256)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=8,
                                 logging_steps=20, save_strategy="no", report_to=[], ddp_backend=args.backend,
                                 dataloader_num_workers=0, disable_tqdm=True,
                                 deepspeed=args.deepspeed, bf16=bool(args.deepspeed))
    Trainer(model=model, args=training, train_dataset=RandomTokens(100000, 256, config.vocab_size)).train()


if __name__ == "__main__":
    main()
