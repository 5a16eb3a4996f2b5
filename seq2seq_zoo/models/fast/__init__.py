"""The models' fast paths, kept apart from the paper models they speed up: the same values up to float
rounding, written by hand only where no library op is as fast on CPU.

``kernels``      attention as batched matmuls, a cheaper dropout mask, packed inference weights, the
                 fp32 log-softmax and the row-blocked output layer + loss behind ``losses``
``outputs``      model outputs whose log-probabilities are made only when read (the loss is fused)
``rnn_kernels``  the recurrent family's encoder run, attention energies, deferred context gradient and
                 decoder cell
``rnn``          the recurrent family's fast implementation (``impl = "fast"``), mixins that
                 ``rnn._Recurrent.fast_variant()`` puts in front of a model class
Measurements: docs/performance.md.
"""
