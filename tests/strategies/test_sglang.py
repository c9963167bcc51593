"""SGLangStrategy is GPU-only with a guarded import: the package works without it."""
from __future__ import annotations

import pytest
import torch

from roll.config.roles import StrategyArgs, WorkerConfig
from roll.registry import STRATEGIES


def test_registered_and_importable_without_sglang():
    cls = STRATEGIES.get("sglang")
    assert cls.__name__ == "SGLangStrategy"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_cpu_is_refused_with_a_pointer():
    cls = STRATEGIES.get("sglang")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        cls(WorkerConfig(model_name_or_path="/nonexistent", strategy_args=StrategyArgs("sglang")))


@pytest.mark.gpu
def test_generate_update_abort_on_gpu(tiny_model_dir):
    pytest.importorskip("sglang")
    import asyncio

    from roll.strategies.base import GenerationRequest

    strat = STRATEGIES.get("sglang")(WorkerConfig(model_name_or_path=tiny_model_dir, strategy_args=StrategyArgs("sglang", {"mem_fraction_static": 0.2})))

    async def scenario():
        await strat.start()
        r = await strat.generate(GenerationRequest("a", [1, 2, 3, 4], max_new_tokens=8, temperature=0.0))
        assert len(r.output_ids) == len(r.logprobs) > 0
        task = asyncio.create_task(strat.generate(GenerationRequest("b", [1, 2, 3], max_new_tokens=2000, temperature=1.0)))
        await asyncio.sleep(0.2)
        await strat.abort(["b"])
        return await task

    r = asyncio.run(scenario())
    assert r.finish_reason == "abort"
    strat.shutdown()
