"""Model packs: the on-disk format (:mod:`.pack`), the ONNX graph builder (:mod:`.build`, no PyTorch),
verification (:mod:`.verify`) and installed-pack management (:mod:`.install`).

Only the light pack reader is re-exported here; the builder imports ``onnx`` and is loaded on demand.
"""

from captioner.models.pack import Dims, Pack, SpecialTokens

__all__ = ["Dims", "Pack", "SpecialTokens"]
