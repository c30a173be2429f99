"""captioner: live captions from system audio or the microphone, transcribed on the device.

Whisper runs with the NPUsper streaming engine (short unpadded buckets, cross-attention
hallucination control, controlled unrolling of the decoder) on ONNX Runtime, preferring the
Snapdragon NPU (QNN HTP), then a GPU, then the CPU.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
