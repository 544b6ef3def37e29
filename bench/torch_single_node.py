#!/usr/bin/env python3
"""PyTorch beside bench/single_node: the same models by shapes, trained the same way.

The demo MLP (784-256-256-10), the CNN of configs/fashion-mnist-cnn.toml and the ResNet-20-style
graph of configs/fashion-mnist-resnet.toml (He et al., CVPR'16, sec. 4.2; basic blocks as
tasks/model.cpp's add_basic_block builds them: conv3x3/s - bn - relu - conv3x3 - bn, + shortcut (a
1x1 projection with its batch norm where the shape changes), relu), on random 1x28x28 inputs in
10 classes (the time of a step does not depend on the values), batch 64, SGD with momentum 0.9,
torch.set_num_threads(--threads). Prints one line: samples/s over --iterations steps after 20
warm-up steps, and the parameter count, which must equal bench_single_node's.

    /usr/bin/python3 bench/torch_single_node.py --model resnet --threads 2 --iterations 150

A benchmark, never a test (bench/torch_compare.sh runs it alternated with bench_single_node).
Needs Debian's python3-torch (not installed by scripts/setup.sh).
"""

import argparse
import time

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, inputs, channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, channels, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Identity()
        if stride != 1 or inputs != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, channels, 1, stride, 0),
                                          nn.BatchNorm2d(channels))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


def resnet():
    layers = [nn.Conv2d(1, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU()]
    inputs = 16
    for channels, stride in [(16, 1), (16, 1), (16, 1), (32, 2), (32, 1), (32, 1), (64, 2),
                             (64, 1), (64, 1)]:
        layers.append(BasicBlock(inputs, channels, stride))
        inputs = channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 10))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="resnet")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    model = {"mlp": mlp, "cnn": cnn, "resnet": resnet}[args.model]()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(20):
        step()
    start = time.perf_counter()
    for _ in range(args.iterations):
        step()
    elapsed = time.perf_counter() - start
    parameters = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__} {args.model}, {parameters} parameters, batch {args.batch}, "
          f"{args.threads} thread(s): {args.iterations * args.batch / elapsed:.0f} samples/s "
          f"({1e3 * elapsed / args.iterations:.3f} ms/iteration)")


if __name__ == "__main__":
    main()
