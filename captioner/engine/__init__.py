"""The NPUsper streaming engine: pure compute (numpy + ONNX Runtime); no Qt, audio devices or settings.

The entry point is :class:`Transcriber` (``transcriber.py``), used by the app, the CLI and the bench::

    engine = Transcriber.open(pack_dir, "auto", cache_dir=paths.cache)  # verified pack on a provider
    words, info = engine.transcribe(audio, StreamConfig(step_s=2.0))     # a file (16 kHz mono float32)
    stream = engine.stream(StreamConfig(step_s=2.0), source="mic")      # live
    stream.feed(samples)            # 16 kHz mono float32
    update = stream.step()          # EngineUpdate | None
    ...
    final = stream.finish()
"""

from captioner.engine.features import log_mel, pad_to_frames
from captioner.engine.model import AcousticModel, ChunkOutput, ChunkRunner, Encoding
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Attempt, EngineInfo, Runtime
from captioner.engine.stream import Stream, StreamConfig
from captioner.engine.tokens import Vocabulary
from captioner.engine.transcriber import Transcriber, TranscriptionInfo, real_time_factor

__all__ = [
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
    "Transcriber",
    "TranscriptionInfo",
    "Vocabulary",
    "log_mel",
    "pad_to_frames",
    "real_time_factor",
]
