#!/usr/bin/env python3
"""The table of a csnn training run beside its PyTorch peer (bench/gpu.sh's train_csnn): the
summary JSON of `flexkit train --summary` and the JSON of `bench/torch_csnn.py --train --json`.

Epoch times leave out the first epoch (kernels compile, torch.compile traces); flexkit's include
its test pass, the peer's do not (so the ratio is not in flexkit's favour).

    python3 bench/csnn_pair.py flexkit.json peer.json
"""
import json
import sys


def steady(history):
    times = [e["seconds"] for e in history[1:]] or [history[0]["seconds"]]
    return sum(times) / len(times)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        mine = json.load(f)
    with open(sys.argv[2]) as f:
        peer = json.load(f)
    h, p = mine["history"], peer["history"]
    mine_epoch, peer_epoch = steady(h), steady(p)
    mine_peak = mine["peak_memory_bytes"].get("device", 0)
    peer_peak = peer.get("peak_memory_bytes", 0)
    peer_name = f"{peer['peer']}, {peer.get('form', 'f32')}"
    print("| csnn | epochs | epoch (s), epochs 2.. | best / final test accuracy | peak memory (MB) |")
    print("|---|---|---|---|---|")
    mine_name = f"flexkit {mine.get('precision', 'f32')}, {mine['device']}"
    print(f"| {mine_name} | {len(h)} | {mine_epoch:.3f} (with its test pass) | "
          f"{100 * mine['best_test_accuracy']:.2f} / {100 * h[-1]['test_accuracy']:.2f} % | "
          f"{mine_peak / 1e6:.1f} |")
    print(f"| {peer_name} | {len(p)} | {peer_epoch:.3f} | "
          f"{100 * peer['best_test_accuracy']:.2f} / {100 * p[-1]['test_accuracy']:.2f} % | "
          f"{peer_peak / 1e6:.1f} |")
    ratio_memory = f"{mine_peak / peer_peak:.3f}x" if peer_peak else "-"
    print(f"| flexkit / peer | | {mine_epoch / peer_epoch:.3f}x | | {ratio_memory} |")
    print("flexkit accuracy:", " ".join(f"{100 * e['test_accuracy']:.2f}" for e in h))
    print("peer accuracy:", " ".join(f"{100 * e['test_accuracy']:.2f}" for e in p))


if __name__ == "__main__":
    main()
