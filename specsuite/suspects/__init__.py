"""The suspects of a case that moved between two llama.cpp builds: the upstream changes in between that
touch what the case exercises (its types' implementation, its models' architectures, the server's
speculative loop, argument parsing, the backend built), from git where a repository knows both builds, else
from the two trees on this machine."""
