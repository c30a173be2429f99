"""The NPUsper streaming engine: pure compute (numpy + ONNX Runtime); no Qt, audio devices or settings.

Typical use::

    pack = Pack.load(path, verify=True)
    model = OnnxAcousticModel(pack, Runtime(pack, "auto", cache_dir=paths.cache))
    stream = Stream(model, StreamConfig(step_s=2.0, language="en"))
    stream.feed(samples)            # 16 kHz mono float32
    update = stream.step()          # EngineUpdate | None
    ...
    final = stream.finish()
"""

from captioner.engine.features import log_mel, pad_to_frames
from captioner.engine.model import AcousticModel, ChunkOutput, ChunkRunner, Encoding
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import PROVIDER_CHOICES, Attempt, EngineInfo, Runtime
from captioner.engine.stream import Stream, StreamConfig
from captioner.engine.tokens import Vocabulary

__all__ = [
    "PROVIDER_CHOICES",
    "AcousticModel",
    "Attempt",
    "ChunkOutput",
    "ChunkRunner",
    "Encoding",
    "EngineInfo",
    "OnnxAcousticModel",
    "Runtime",
    "Stream",
    "StreamConfig",
    "Vocabulary",
    "log_mel",
    "pad_to_frames",
]
