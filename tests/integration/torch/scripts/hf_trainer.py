"""A Hugging Face ``Trainer`` run (accelerate underneath), the way most fine-tuning scripts train.

``hf_trainer.py cpu|cuda [fp16]``: a tiny GPT-2 from a config (dropout off, so that the host run is the
reference to the bit), four optimizer steps and an evaluation; prints one JSON line.
"""

import json
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


device, fp16 = sys.argv[1], "fp16" in sys.argv[2:]
torch.manual_seed(0)
config = GPT2Config(
    n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
)
model = GPT2LMHeadModel(config)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(
        output_dir=out,
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        use_cpu=device == "cpu",
        fp16=fp16,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    result = {
        "device": str(next(model.parameters()).device),
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "eval_loss": trainer.evaluate(Tokens())["eval_loss"],
    }
print(json.dumps(result), flush=True)
