#!/usr/bin/env python3
"""Data-parallel training with MindSpore 2.3+, started by msrun or msrun-ssh.

Follows MindSpore's own msrun tutorial (``startup_method/net.py``) but needs no data download:
a small dense network learns a synthetic regression task. Every rank builds the same data set
from the same seed, and ``GeneratorDataset`` gives each rank its own shard by ``get_rank()`` /
``get_group_size()``. ``Model.train`` averages the gradients over all ranks (DATA_PARALLEL with
``gradients_mean=True``). ``LossMonitor`` prints ``epoch: E step: S, loss is L`` on every rank.

The launcher starts this same script once more as the scheduler (``MS_ROLE=MS_SCHED``). As in
the tutorial, the script never checks its role: MindSpore handles it inside ``init()`` and
``Model.train``. The scheduler builds the cluster, does no real training (its rank reads as 0
of 1, and its data set does nothing) and exits once the workers are done.

Usage (2 hosts x 8 devices, see examples/hosts.toml):

    msrun-ssh --hostfile examples/hosts.toml examples/mindspore_dp/train.py --epochs 5
"""

import argparse

import numpy as np

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import LossMonitor, Model, TimeMonitor

NUM_FEATURES = 16
HIDDEN_UNITS = 64
DATA_SEED = 1234


class SyntheticRegression:
    """A random-access data source: y = tanh(x . A) . b + noise, with x ~ N(0, 1).

    Random access (``__getitem__`` + ``__len__``) is what lets GeneratorDataset shard it.
    The same seed on every rank gives every rank the same global data set, and sharding then
    hands each rank a disjoint part of it.
    """

    def __init__(self, num_samples, seed=DATA_SEED):
        rng = np.random.default_rng(seed)
        projection = rng.standard_normal((NUM_FEATURES, 8)) / np.sqrt(NUM_FEATURES)
        readout = rng.standard_normal((8, 1))
        features = rng.standard_normal((num_samples, NUM_FEATURES))
        noise = 0.05 * rng.standard_normal((num_samples, 1))
        self._features = features.astype(np.float32)
        self._labels = (np.tanh(features @ projection) @ readout + noise).astype(np.float32)

    def __getitem__(self, index):
        return self._features[index], self._labels[index]

    def __len__(self):
        return len(self._features)


def create_dataset(batch_size, num_samples):
    """This rank's shard of the synthetic data, shuffled and batched."""
    rank_id = get_rank()
    rank_size = get_group_size()
    dataset = ds.GeneratorDataset(SyntheticRegression(num_samples), column_names=["data", "label"],
                                  shuffle=True, num_shards=rank_size, shard_id=rank_id)
    # All ranks must take the same number of steps per epoch, so drop the ragged last batch.
    return dataset.batch(batch_size, drop_remainder=True)


class Network(nn.Cell):
    """A small multi-layer perceptron: Dense -> ReLU -> Dense -> ReLU -> Dense."""

    def __init__(self):
        super().__init__()
        self.layers = nn.SequentialCell([
            nn.Dense(NUM_FEATURES, HIDDEN_UNITS),
            nn.ReLU(),
            nn.Dense(HIDDEN_UNITS, HIDDEN_UNITS),
            nn.ReLU(),
            nn.Dense(HIDDEN_UNITS, 1),
        ])

    def construct(self, x):
        return self.layers(x)


def parse_args():
    """Task arguments: the same for the scheduler and every worker."""
    parser = argparse.ArgumentParser(description="MindSpore data-parallel example for msrun")
    parser.add_argument("--epochs", type=int, default=3, help="number of epochs (default 3)")
    parser.add_argument("--batch", type=int, default=32, help="batch size per rank (default 32)")
    parser.add_argument("--samples", type=int, default=8192,
                        help="size of the global synthetic data set (default 8192)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    parser.add_argument("--print_every", type=int, default=10,
                        help="LossMonitor prints every N steps (default 10)")
    parser.add_argument("--device_target", choices=["Ascend", "GPU", "CPU"], default=None,
                        help="default: the backend of the installed MindSpore package")
    parser.add_argument("--mode", choices=["graph", "pynative"], default="graph")
    parser.add_argument("--sink_mode", action="store_true",
                        help="dataset sink mode (LossMonitor then prints once per sink)")
    return parser.parse_args()


def set_device(device_target):
    """Choose the backend: ms.set_device from MindSpore 2.5 on, set_context before that."""
    if hasattr(ms, "set_device"):
        ms.set_device(device_target)
    else:
        ms.set_context(device_target=device_target)


def main():
    args = parse_args()

    # As in the msrun tutorial: execution mode, then parallel mode, then init() of the
    # communication backend (HCCL, NCCL or MCCL, picked from the device).
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    if args.device_target:
        set_device(args.device_target)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    init()
    # The same seed everywhere: every replica starts from the same weights.
    ms.set_seed(1)

    rank_id, rank_size = get_rank(), get_group_size()
    print(f"rank {rank_id} of {rank_size}: {args.samples // rank_size} samples, "
          f"{args.samples // rank_size // args.batch} steps per epoch", flush=True)

    dataset = create_dataset(args.batch, args.samples)
    net = Network()
    loss_fn = nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=args.lr, momentum=0.9)
    model = Model(net, loss_fn=loss_fn, optimizer=optimizer)
    model.train(args.epochs, dataset,
                callbacks=[LossMonitor(args.print_every), TimeMonitor()],
                dataset_sink_mode=args.sink_mode)
    print(f"rank {rank_id} finished", flush=True)


if __name__ == "__main__":
    main()
