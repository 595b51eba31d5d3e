"""``specsuite bisect``: the llama.cpp commit that made a case worse, by ``git bisect run``."""
