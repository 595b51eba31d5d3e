"""The head of a small hand-written cases file for tests: the version and the two prompt sets it names."""

HEAD = """version = 1
[[prompt_set]]
name = "seed"
prompts = [{ id = "fib", text = "x" }]
[[prompt_set]]
name = "synthetic"
prompts = [{ id = "fox", text = "y" }]
"""
