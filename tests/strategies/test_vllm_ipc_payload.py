"""The CUDA IPC weight bucket is read with an allowlist: a payload that names any other callable
(code execution on unpickling) is refused; the globals reduce_tensor emits load."""
import os
import pickle

import pytest
import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor

from roll.strategies.vllm import load_ipc_payload


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_payload_naming_another_callable_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "PWNED"
    data = pickle.dumps([("w", (_Payload(str(marker)), ()))])
    with pytest.raises(pickle.UnpicklingError, match="posix.mkdir|os.mkdir"):
        load_ipc_payload(data)
    assert not marker.exists()


def test_the_globals_of_a_cuda_handle_load():
    # the shape of reduce_tensor's output for a CUDA tensor, without needing a GPU
    args = (torch.Tensor, (2, 3), (3, 1), 0, torch.UntypedStorage, torch.bfloat16, 0, b"handle", 24, 0, False,
            b"ref", 0, b"event", False)
    [(name, (rebuild, got))] = load_ipc_payload(pickle.dumps([("w", (rebuild_cuda_tensor, args))]))
    assert name == "w" and rebuild is rebuild_cuda_tensor and got == args
