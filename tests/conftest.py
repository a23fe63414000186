"""One torch thread per pytest-xdist worker: the workers already use every core (`-n auto`), and more threads
than cores only make each of them wait."""

from __future__ import annotations

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
