"""`aka convert`: find the PyTorch fallbacks of a suite, a model or a trace, and turn them into kernels."""
