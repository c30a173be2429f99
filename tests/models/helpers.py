"""Test helpers: the transformers reference of a tiny checkpoint, and a minimal host loop over a pack.

The reference runs transformers' own modules on exactly the real number of mel frames (its
``WhisperEncoder.forward`` insists on 3000 frames, so the layers are called one by one, as
``forward`` does). :class:`PackRunner` drives the pack's graphs the way the engine does: encoder
once, then the decoder chunk graphs of a schedule, writing ``new_k``/``new_v`` into the fixed cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from captioner.models.pack import FRAMES_DIM, Pack, layer_feeds

MASK = -100.0


def random_mel(n_mels: int, n_frames: int, bucket: int, seed: int) -> np.ndarray:
    """[1, n_mels, 100·bucket] float32: 2·n_frames random mel frames, then 0.0 padding (host convention)."""
    rng = np.random.default_rng(seed)
    mel = np.zeros((1, n_mels, 100 * bucket), np.float32)
    mel[:, :, : 2 * n_frames] = rng.uniform(-1.0, 1.5, (1, n_mels, 2 * n_frames)).astype(np.float32)
    return mel


class Reference:
    """transformers' WhisperForConditionalGeneration (eager attention) on exact lengths."""

    def __init__(self, checkpoint: Path) -> None:
        from transformers import WhisperForConditionalGeneration

        self.model = WhisperForConditionalGeneration.from_pretrained(checkpoint, attn_implementation="eager").eval()
        self.eot = int(self.model.config.eos_token_id)

    @torch.no_grad()
    def encode(self, mel: np.ndarray) -> torch.Tensor:
        """Encoder output [1, n, d] of exactly the mel frames given ([1, n_mels, 2n])."""
        enc = self.model.model.encoder
        x = torch.nn.functional.gelu(enc.conv1(torch.from_numpy(mel)))
        x = torch.nn.functional.gelu(enc.conv2(x)).permute(0, 2, 1)
        x = x + enc.embed_positions.weight[: x.shape[1]]
        for layer in enc.layers:
            x = layer(x, None)
        return enc.layer_norm(x)

    @torch.no_grad()
    def cross_kv(self, enc_out: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Every decoder layer's encoder_attn k_proj/v_proj of ``enc_out``, laid out as the pack's encoder
        returns them (frames last): [L, 1, H, hd, n] each."""
        ks, vs = [], []
        for layer in self.model.model.decoder.layers:
            attn = layer.encoder_attn
            shape = (1, enc_out.shape[1], attn.num_heads, attn.head_dim)
            ks.append(attn.k_proj(enc_out).reshape(shape).permute(0, 2, 3, 1).numpy())
            vs.append(attn.v_proj(enc_out).reshape(shape).permute(0, 2, 3, 1).numpy())
        return np.stack(ks), np.stack(vs)

    @torch.no_grad()
    def decode(self, enc_out: torch.Tensor, tokens: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits [S, V] and per-layer cross-attention [H, S, n] for the token sequence."""
        out = self.model(decoder_input_ids=torch.tensor([tokens]), encoder_outputs=(enc_out,),
                         output_attentions=True, use_cache=False)
        return out.logits[0].numpy(), [a[0].numpy() for a in out.cross_attentions]

    @torch.no_grad()
    def self_kv(self, enc_out: torch.Tensor, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Self-attention keys and values of every decoder layer for ``tokens``: [L, 1, H, S, hd] each."""
        out = self.model(decoder_input_ids=torch.tensor([tokens]), encoder_outputs=(enc_out,),
                         output_hidden_states=True, use_cache=False)
        ks, vs = [], []
        for layer, hidden in zip(self.model.model.decoder.layers, out.decoder_hidden_states, strict=False):
            attn = layer.self_attn
            h = layer.self_attn_layer_norm(hidden)
            shape = (1, len(tokens), attn.num_heads, attn.head_dim)
            ks.append(attn.k_proj(h).reshape(shape).permute(0, 2, 1, 3).numpy())
            vs.append(attn.v_proj(h).reshape(shape).permute(0, 2, 1, 3).numpy())
        return np.stack(ks), np.stack(vs)

    @torch.no_grad()
    def greedy(self, enc_out: torch.Tensor, prompt: list[int], positions: int) -> list[int]:
        """Tokens at positions 0…positions: the prompt, then argmax over ids < EOT at each free position.

        The prompt is run as one prefill; each further token is one cached step (transformers' own KV cache).
        """
        seq = list(prompt)
        out = self.model(decoder_input_ids=torch.tensor([seq]), encoder_outputs=(enc_out,), use_cache=True)
        while len(seq) <= positions:
            seq.append(int(np.argmax(out.logits[0, -1, : self.eot].numpy())))
            if len(seq) <= positions:
                out = self.model(decoder_input_ids=torch.tensor([seq[-1:]]), encoder_outputs=(enc_out,),
                                 past_key_values=out.past_key_values, use_cache=True)
        return seq


@dataclass
class Encoded:
    """Encoder outputs of one round as the decoder chunks consume them."""

    bucket: int
    n_frames: int
    cross_k: np.ndarray
    cross_v: np.ndarray

    @property
    def cross_mask(self) -> np.ndarray:
        mask = np.full(50 * self.bucket, MASK, np.float32)
        mask[: self.n_frames] = 0.0
        return mask


class PackRunner:
    """Runs a pack's graphs with ONNX Runtime (CPU unless ``session_options`` say otherwise)."""

    def __init__(self, pack: Pack, make_options=None) -> None:
        self.pack = pack
        self.make_options = make_options or self._cpu_options
        self._sessions: dict[tuple[Path, int | None], ort.InferenceSession] = {}

    @staticmethod
    def _cpu_options() -> tuple[ort.SessionOptions, list[str] | None]:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        return so, ["CPUExecutionProvider"]

    def session(self, path: Path, frames: int | None = None) -> ort.InferenceSession:
        """The session of ``path``; a chunk graph's symbolic ``frames`` fixed when given (as on the NPU)."""
        if (path, frames) not in self._sessions:
            so, providers = self.make_options()
            if frames is not None:
                so.add_free_dimension_override_by_name(FRAMES_DIM, frames)
            self._sessions[(path, frames)] = ort.InferenceSession(str(path), so, providers=providers)
        return self._sessions[(path, frames)]

    def empty_cache(self, bucket: int) -> np.ndarray:
        """A zeroed self-attention cache [L, 1, H, S, hd] of ``bucket``'s graphs."""
        d = self.pack.dims
        return np.zeros((d.decoder_layers, 1, d.decoder_heads, self.pack.cache_slots[bucket], d.head_dim), np.float32)

    def encode(self, mel: np.ndarray, n_frames: int, bucket: int) -> Encoded:
        k, v = self.session(self.pack.encoder_file(bucket)).run(
            None, {"mel": mel, "n_frames": np.array([n_frames], np.int64)})
        return Encoded(bucket, n_frames, k, v)

    def chunk(self, enc: Encoded, start: int, size: int, token: int, forced: list[int],
              self_k: np.ndarray, self_v: np.ndarray) -> dict[str, np.ndarray]:
        """Run one chunk graph over a cache whose slots < ``start`` are filled; returns its outputs by name."""
        known = self.pack.decoder_known(enc.bucket, start, size)
        assert min(forced[: known - 1], default=0) >= 0, f"chunk ({start}, {size}) batches {known} given tokens"
        sess = self.session(self.pack.decoder_file(enc.bucket, start, size), frames=50 * enc.bucket)
        self_mask = np.full(self_k.shape[3], MASK, np.float32)
        self_mask[:start] = 0.0
        feeds = {"token": np.array([token], np.int64), "forced": np.array(forced, np.int64),
                 "positions": np.arange(start, start + size, dtype=np.int64),
                 "self_mask": self_mask, "cross_mask": enc.cross_mask,
                 **layer_feeds(self_k=self_k, self_v=self_v, cross_k=enc.cross_k, cross_v=enc.cross_v)}
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, feeds), strict=True))

    def plan(self, bucket: int, schedule: str, positions: int | None = None) -> list[tuple[int, int]]:
        """(start, size) of the chunks of ``schedule``, continued with long chunks up to ``positions``."""
        chunks, start = [], 0
        for size in self.pack.schedules[schedule]:
            chunks.append((start, size))
            start += size
        available = set(self.pack.decoder_chunks(bucket))
        while positions is not None and start < positions and (start, self.pack.long_chunk) in available:
            chunks.append((start, self.pack.long_chunk))
            start += self.pack.long_chunk
        return chunks

    def greedy(self, enc: Encoded, prompt: list[int], chunks: list[tuple[int, int]],
               forced_override: dict[int, int] | None = None) -> tuple[list[int], list[dict]]:
        """Decode through ``chunks``: positions < len(prompt) are forced, the rest are the model's argmax.

        ``forced_override`` forces given positions to given tokens (teacher forcing). Returns the
        token at every position 0…end and each chunk's outputs.
        """
        forced_at = {i: t for i, t in enumerate(prompt)} | (forced_override or {})
        seq = [prompt[0]]
        self_k, self_v = self.empty_cache(enc.bucket), self.empty_cache(enc.bucket)
        outputs = []
        for start, size in chunks:
            assert len(seq) == start + 1
            forced = [forced_at.get(start + s + 1, -1) for s in range(size - 1)]
            out = self.chunk(enc, start, size, seq[start], forced, self_k, self_v)
            outputs.append(out)
            end = min(start + size, self_k.shape[3])
            self_k[:, :, :, start:end] = out["new_k"][:, :, :, : end - start]
            self_v[:, :, :, start:end] = out["new_v"][:, :, :, : end - start]
            for s in range(size):
                pos = start + s + 1
                seq.append(forced_at.get(pos, int(out["tokens"][s])))
        return seq, outputs
