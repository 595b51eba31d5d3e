"""Build llama.cpp's llama-server and run a speculative-decoding regression suite against it."""

__version__ = "0.1.0"
