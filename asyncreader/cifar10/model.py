"""A small numpy image classifier for the demo: softmax regression on pooled pixels.

The model is deliberately tiny — the demo is about the input pipeline — yet learns real
structure: each standardised 24x24x3 image is average-pooled over 3x3 blocks into 192
features (pooling makes it robust to the crops' few-pixel shifts), and a linear layer with
a softmax is trained by minibatch SGD with momentum and weight decay. Every step is a few
vectorised numpy calls on the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SoftmaxClassifier", "StepResult", "pool_features"]


def pool_features(images: np.ndarray[Any, Any], pool: int = 3) -> np.ndarray[Any, Any]:
    """Average-pool ``(n, h, w, c)`` images over ``pool`` x ``pool`` blocks, flattened.

    Args:
        images: Float images whose height and width are multiples of ``pool``.
        pool: Block side.

    Returns:
        ``(n, (h // pool) * (w // pool) * c)`` float32 features.

    Raises:
        ValueError: the images' sides are not multiples of ``pool``.
    """
    n, h, w, c = images.shape
    if h % pool or w % pool:
        raise ValueError(f"images of {h}x{w} cannot be pooled in {pool}x{pool} blocks")
    # Sum rows first (long contiguous runs), then the width blocks as `pool` slices of the
    # last axis: reducing the short pooled axes directly is several times slower.
    rows = np.ascontiguousarray(images, dtype=np.float32).reshape(n, h // pool, pool, w * c)
    blocks = rows.sum(axis=2).reshape(n, h // pool, w // pool, pool * c)
    pooled = blocks[..., :c].copy()
    for k in range(1, pool):
        pooled += blocks[..., k * c : (k + 1) * c]
    pooled *= np.float32(1.0 / (pool * pool))
    flat: np.ndarray[Any, Any] = pooled.reshape(n, -1)
    return flat


@dataclass(frozen=True, slots=True)
class StepResult:
    """The outcome of one training step.

    Attributes:
        loss: Mean cross-entropy of the batch before the update.
        accuracy: Fraction of the batch classified correctly before the update.
    """

    loss: float
    accuracy: float


class SoftmaxClassifier:
    """Softmax regression on :func:`pool_features`, trained by SGD with momentum.

    Args:
        num_classes: Number of classes.
        num_features: Length of the feature vector.
        learning_rate: SGD step size.
        momentum: Momentum coefficient.
        weight_decay: L2 penalty on the weights.
        seed: Seed of the initial weights.
    """

    __slots__ = ("_b", "_lr", "_momentum", "_vb", "_vw", "_w", "_wd", "steps")

    def __init__(
        self,
        num_classes: int,
        num_features: int,
        *,
        learning_rate: float = 0.05,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        seed: int | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        self._w = (rng.standard_normal((num_features, num_classes)) * 0.01).astype(np.float32)
        self._b = np.zeros(num_classes, np.float32)
        self._vw = np.zeros_like(self._w)
        self._vb = np.zeros_like(self._b)
        self._lr = np.float32(learning_rate)
        self._momentum = np.float32(momentum)
        self._wd = np.float32(weight_decay)
        #: Training steps taken.
        self.steps = 0

    def logits(self, images: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Return the ``(n, num_classes)`` class scores of a batch of images."""
        return pool_features(images) @ self._w + self._b

    def predict(self, images: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Return the predicted class of each image, ``(n,)`` int64."""
        classes: np.ndarray[Any, Any] = np.argmax(self.logits(images), axis=1)
        return classes

    def train_step(self, images: np.ndarray[Any, Any], labels: np.ndarray[Any, Any]) -> StepResult:
        """Take one SGD step on a batch; return its loss and accuracy before the update.

        Args:
            images: ``(n, h, w, c)`` float32 standardised images.
            labels: ``(n,)`` integer classes.

        Returns:
            A :class:`StepResult`.
        """
        x = pool_features(images)
        n = x.shape[0]
        scores = x @ self._w + self._b
        scores -= scores.max(axis=1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=1, keepdims=True)
        rows = np.arange(n)
        loss = float(-np.log(probs[rows, labels] + 1e-12).mean())
        accuracy = float((probs.argmax(axis=1) == labels).mean())
        probs[rows, labels] -= 1.0
        probs /= n
        grad_w = x.T @ probs + self._wd * self._w
        grad_b = probs.sum(axis=0)
        self._vw *= self._momentum
        self._vw -= self._lr * grad_w
        self._vb *= self._momentum
        self._vb -= self._lr * grad_b
        self._w += self._vw
        self._b += self._vb
        self.steps += 1
        return StepResult(loss, accuracy)

    def __repr__(self) -> str:
        features, classes = self._w.shape
        return f"<SoftmaxClassifier features={features} classes={classes} steps={self.steps}>"
