"""Fingerprint of the tiny policy's forward + backward bits under this process's threads and CPU kernels.

    ragym tiny-policy --arch qwen2_5_vl --out /tmp/tiny_policy
    python benchmarks/kernel_fingerprint.py /tmp/tiny_policy --threads 1
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/kernel_fingerprint.py /tmp/tiny_policy --threads 1
    MKL_CBWR=AVX2 python benchmarks/kernel_fingerprint.py /tmp/tiny_policy --threads 1

The same hash means bitwise the same numbers; the demo's runs repeat exactly only where it does not change
(same torch build, CPU kernels and thread count). The loss is printed too: it agrees to ~1e-9 either way.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ragym.rl.models import load_policy  # noqa: E402


def main() -> None:
    """Print threads, the kernel set torch dispatches to, the loss and a hash of logits and gradients."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", help="a tiny policy folder (ragym tiny-policy)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer, _ = load_policy(args.policy)
    torch.manual_seed(0)
    ids = torch.randint(0, tokenizer.vocab_size, (8, 96))  # [B, T]
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()  # [B, T, V]
    loss = logits.logsumexp(-1).mean()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    digest = hashlib.sha256(logits.detach().numpy().tobytes() + grads.numpy().tobytes()).hexdigest()[:16]
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"threads={args.threads} capability={capability} loss={loss.item():.10f} hash={digest}")


if __name__ == "__main__":
    main()
