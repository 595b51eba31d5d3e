"""One llama-server binary and process: what it can run (probe), its life (process, ports), its counters
(metrics), why it died (failure), the device it measures on, and the front ends' mode resolver."""
