"""aka: autonomous GPU-kernel optimization, measured honestly."""

__version__ = "0.1.0"
